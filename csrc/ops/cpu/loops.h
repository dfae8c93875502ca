// Parallel, vectorized loop drivers for the CPU kernels.
//
// Every kernel is written once, as an operation on at::vec::Vectorized values; tails are
// handled with partial loads/stores of the same vectors, so there is a single code path
// and the last elements round exactly like the rest.
#pragma once

#include "ops/common/param_layout.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <type_traits>
#include <vector>

// CPU_CAPABILITY (DEFAULT, AVX2, AVX512) names the instruction set this copy is compiled for.
namespace brevitas_cpp::cpu::CPU_CAPABILITY {

template <typename T>
using Vec = at::vec::Vectorized<T>;

// Elements per task of at::parallel_for: large enough to amortise a thread wake-up.
constexpr int64_t kGrainSize = 32768;

// out[j] = op(in[j]) over n elements of dense memory, in parallel.
template <typename T, typename Op>
void unary_loop(const T* in, T* out, int64_t n, const Op& op) {
  constexpr int64_t V = Vec<T>::size();
  at::parallel_for(0, n, kGrainSize, [&](int64_t begin, int64_t end) {
    int64_t j = begin;
    for (; j + V <= end; j += V) op(Vec<T>::loadu(in + j)).store(out + j);
    if (j < end) op(Vec<T>::loadu(in + j, end - j)).store(out + j, end - j);
  });
}

// Splits [begin, end) of a ParamLayout's flat index into runs and calls
//   f(offset, length, k, strided)
// where strided == false: all `length` elements use parameter entry k, and
//       strided == true:  element offset + j uses parameter entry k + j.
template <typename F>
inline void for_each_run(const ParamLayout& L, int64_t begin, int64_t end, F&& f) {
  int64_t idx = begin;
  if (L.inner == 1 && L.K > 1) {
    while (idx < end) {
      const int64_t k = idx % L.K;
      const int64_t n = std::min(L.K - k, end - idx);
      f(idx, n, k, true);
      idx += n;
    }
  } else {
    while (idx < end) {
      const int64_t row = idx / L.inner;
      const int64_t i = idx - row * L.inner;
      const int64_t n = std::min(L.inner - i, end - idx);
      f(idx, n, row % L.K, false);
      idx += n;
    }
  }
}

// Loads the parameter vector for lane block starting at element j of a run.
template <typename T>
inline Vec<T> load_param(const T* p, int64_t k, int64_t j, bool strided, int64_t count) {
  return strided ? Vec<T>::loadu(p + k + j, count) : Vec<T>(p[k]);
}

// Calls body(offset, count) for every vector block of [0, n): full blocks, then one partial.
template <typename T, typename Body>
inline void for_each_block(int64_t n, const Body& body) {
  constexpr int64_t V = Vec<T>::size();
  int64_t j = 0;
  for (; j + V <= n; j += V) body(j, V);
  if (j < n) body(j, n - j);
}

// Deterministic parallel reduction: [0, n) is cut into chunks whose boundaries depend on n
// only (not on the thread count), each with its own accumulator block of `width` doubles,
// summed in chunk order afterwards. body(begin, end, acc) adds into acc.
template <typename Body>
std::vector<double> chunked_reduce(int64_t n, int64_t width, const Body& body) {
  constexpr int64_t kMaxChunks = 64;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(kMaxChunks, (n + kGrainSize - 1) / kGrainSize));
  const int64_t chunk_size = (n + chunks - 1) / chunks;
  std::vector<double> partial(static_cast<size_t>(chunks * width), 0.0);
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const int64_t b = c * chunk_size;
      const int64_t e = std::min(n, b + chunk_size);
      if (b < e) body(b, e, partial.data() + c * width);
    }
  });
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t w = 0; w < width; ++w) total[w] += partial[c * width + w];
  return total;
}

// Adds the lanes of v (first `count`) into acc[0..count) or, when !strided, all into acc[0].
template <typename T>
inline void accumulate_lanes(const Vec<T>& v, int64_t count, bool strided, double* acc) {
  T tmp[Vec<T>::size()];
  v.store(tmp, count);
  if (strided) {
    for (int64_t j = 0; j < count; ++j) acc[j] += static_cast<double>(tmp[j]);
  } else {
    double s = 0.0;
    for (int64_t j = 0; j < count; ++j) s += static_cast<double>(tmp[j]);
    acc[0] += s;
  }
}

// Sums the contributions of one run (see for_each_run) into double accumulators: per lane
// into acc[j] for a strided run, all into acc[0] otherwise. Shared-parameter runs of float
// and double sum in vector lanes, flushed to double every kFlushBlocks blocks.
template <typename T>
class RunSum {
 public:
  RunSum(double* acc, bool strided) : acc_(acc), strided_(strided) {}
  RunSum(const RunSum&) = delete;
  RunSum& operator=(const RunSum&) = delete;
  ~RunSum() { flush(); }

  void add(int64_t j, const Vec<T>& v, int64_t count) {
    if (strided_ || !kVectorSum) {
      accumulate_lanes(v, count, strided_, acc_ + (strided_ ? j : 0));
      return;
    }
    lanes_ = lanes_ + (count == Vec<T>::size() ? v : Vec<T>::set(Vec<T>(T(0)), v, count));
    if (++blocks_ == kFlushBlocks) flush();
  }

  void flush() {
    if (blocks_ == 0) return;
    accumulate_lanes(lanes_, Vec<T>::size(), false, acc_);
    lanes_ = Vec<T>(T(0));
    blocks_ = 0;
  }

 private:
  static constexpr bool kVectorSum = std::is_same_v<T, float> || std::is_same_v<T, double>;
  static constexpr int kFlushBlocks = 128;
  double* acc_;
  bool strided_;
  Vec<T> lanes_ = Vec<T>(T(0));
  int blocks_ = 0;
};

// Writes, for each of the first `count` lanes, whether the lane of `flags` is clear (a
// comparison result: all bits set or none) as a bool.
template <typename T>
inline void store_clear_lanes(const Vec<T>& flags, bool* out, int64_t count) {
  T tmp[Vec<T>::size()];
  flags.store(tmp);
  const auto* bytes = reinterpret_cast<const unsigned char*>(tmp);
  for (int64_t j = 0; j < count; ++j) out[j] = bytes[j * sizeof(T)] == 0;
}

// A comparison-style mask (all bits set where in[j] is true) from `count` bools.
template <typename T>
inline Vec<T> load_bool_mask(const bool* in, int64_t count) {
  T tmp[Vec<T>::size()] = {};
  for (int64_t j = 0; j < count; ++j) tmp[j] = in[j] ? T(1) : T(0);
  return Vec<T>(Vec<T>::loadu(tmp) == Vec<T>(T(1)));
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
