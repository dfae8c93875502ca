#include "ops/cuda/loops.cuh"

#include <ATen/Dispatch.h>

#include <algorithm>

namespace brevitas_cpp::cuda {

namespace {

template <typename T>
__global__ void param_grad_kernel(const double* partial, int64_t K, int64_t chunks, int row_a, int row_b, T* out) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= K) return;
  T v = static_cast<T>(Partials::sum(partial, K, chunks, row_a, k));
  if (row_b >= 0) v = v + static_cast<T>(Partials::sum(partial, K, chunks, row_b, k));
  out[k] = v;
}

__global__ void row_sum_kernel(const double* partial, int64_t K, int64_t chunks, int row, double* out) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < K) out[k] = Partials::sum(partial, K, chunks, row, k);
}

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>((n + kBlock - 1) / kBlock);
}

}  // namespace

at::Tensor param_grad(const Partials& p, const ParamLayout& L, int row_a, int row_b, const at::Tensor& param) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const double* partial = p.partial.const_data_ptr<double>();
  // Common case: the parameter holds exactly the K entries in its own order (per tensor, per
  // channel): one kernel writes the result.
  if (param.numel() == p.K && std::is_sorted(L.span_dims.begin(), L.span_dims.end())) {
    at::Tensor out = at::empty(param.sizes(), param.options());
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, param.scalar_type(), "param_grad_cuda", [&] {
      param_grad_kernel<scalar_t><<<blocks_for(p.K), kBlock, 0, stream>>>(partial, p.K, p.chunks, row_a, row_b,
                                                                          out.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    return out;
  }
  auto folded_row = [&](int row) {
    at::Tensor sums = at::empty({p.K}, p.partial.options());
    row_sum_kernel<<<blocks_for(p.K), kBlock, 0, stream>>>(partial, p.K, p.chunks, row,
                                                           sums.mutable_data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return L.fold_tensor_to(sums, param);
  };
  at::Tensor g = folded_row(row_a);
  if (row_b >= 0) g.add_(folded_row(row_b));
  return g;
}

}  // namespace brevitas_cpp::cuda
