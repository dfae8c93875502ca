#include "ops/cuda/int_bounds.cuh"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace brevitas_cpp::cuda {

namespace {

// One block: thread i sums entries i, i + kBlock, ... (each over its chunks), then a fixed tree.
template <typename TG, typename TB>
__global__ void __launch_bounds__(kBlock)
    bit_width_grad_kernel(const double* partial, int64_t K, int64_t chunks, int row_hi, int row_lo, BitWidthRef bw,
                          bool is_signed, TB* out) {
  __shared__ double hi[kBlock], lo[kBlock];
  double h = 0.0, l = 0.0;
  for (int64_t k = threadIdx.x; k < K; k += kBlock) {
    h += Partials::sum(partial, K, chunks, row_hi, k);
    l += Partials::sum(partial, K, chunks, row_lo, k);
  }
  hi[threadIdx.x] = h;
  lo[threadIdx.x] = l;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      hi[threadIdx.x] += hi[threadIdx.x + half];
      lo[threadIdx.x] += lo[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double g_hi = static_cast<double>(static_cast<TG>(hi[0]));
    const double g_lo = static_cast<double>(static_cast<TG>(lo[0]));
    const double b = load_single_value(bw.ptr, bw.dtype);
    out[0] = static_cast<TB>(g_hi * max_int_slope(b, is_signed) + g_lo * min_int_slope(b, is_signed));
  }
}

}  // namespace

at::Tensor bit_width_grad(const Partials& p, int row_hi, int row_lo, at::ScalarType grad_dtype,
                          const at::Tensor& bit_width, bool is_signed) {
  const c10::cuda::CUDAGuard guard(bit_width.device());
  at::Tensor out = at::empty(bit_width.sizes(), bit_width.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_dtype, "bit_width_grad_cuda", [&] {
    using TG = scalar_t;
    AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, bit_width.scalar_type(), "bit_width_grad_cuda", [&] {
      bit_width_grad_kernel<TG, scalar_t><<<1, kBlock, 0, c10::cuda::getCurrentCUDAStream()>>>(
          p.partial.const_data_ptr<double>(), p.K, p.chunks, row_hi, row_lo, BitWidthRef(bit_width), is_signed,
          out.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return out;
}

}  // namespace brevitas_cpp::cuda
