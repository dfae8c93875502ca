// Typed handles to our own ops, so C++ callers (autograd kernels, tests, users) go through
// the dispatcher and every dispatch key (Autograd, Meta, fake tensors) sees the call.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace brevitas_cpp {

template <typename Sig>
c10::TypedOperatorHandle<Sig> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

}  // namespace brevitas_cpp
