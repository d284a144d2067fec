// Internal: the hot loops of scoring (gmm.cpp), EM and k-means (gmm_fit.cpp).
//
// Samples are processed four at a time, one SIMD lane each (GCC vector extensions: two SSE2
// registers on any x86-64, one AVX2 or AVX-512VL register where the CPU has it, the clone chosen
// at load time), looping over components and features with the sample's features in registers. exp
// and log are evaluated in the lanes too (to within ~1 ulp). Results do not depend on which
// instruction set ran: the same operations in the same order, lane by lane, and no fused
// multiply-add.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <vector>

#include "analysis/gmm.h"

namespace eacgm::detail {

// Samples per parallel task. Partial sums are kept per task and added in task order, so that a
// fit does not depend on the number of threads.
inline constexpr Eigen::Index kGmmChunk = 4096;

// A model's parameters, flattened for the kernels.
struct KernelModel {
  explicit KernelModel(const GaussianMixture& model);
  Eigen::Index k = 0;
  Eigen::Index d = 0;
  bool full = true;
  std::vector<double> means;  // k × d, row-major
  std::vector<double> inverse;  // full: k × d × d row-major (L⁻¹); otherwise k × d (its diagonal)
  std::vector<double> log_norm;  // k
};

// Column-major samples: feature j of sample i is x[j * ld + i].
struct Samples {
  const double* x = nullptr;
  Eigen::Index ld = 0;
  Eigen::Index d = 0;
};

// What score_range writes for every sample i of its range; null pointers are skipped.
struct ScoreOutputs {
  double* log_likelihood = nullptr;   // [i]
  int* component = nullptr;           // [i] the most likely component
  double* mahalanobis = nullptr;      // [i] the distance to it
  double* resp = nullptr;             // [c * ld + i] responsibilities
  double* mahalanobis_all = nullptr;  // [c * ld + i] distance to every component
  Eigen::Index ld = 0;
};

void score_range(const KernelModel& model, const Samples& samples, Eigen::Index begin,
                 Eigen::Index end, const ScoreOutputs& out);

// The E-step and the sums the M-step needs, for samples [begin, end). `stats` (em_stats_size
// doubles, zeroed by the caller) receives, per component c at offset c * em_stats_stride:
//   Σ r_ic, then Σ r_ic (x_i − μ_c) (d values), then Σ r_ic (x_i − μ_c)(x_i − μ_c)ᵀ: the lower
//   triangle row by row (d(d+1)/2 values) when full, else its diagonal (d values).
// Returns Σ log p(x_i).
Eigen::Index em_stats_stride(const KernelModel& model);
double em_stats_range(const KernelModel& model, const Samples& samples, Eigen::Index begin,
                      Eigen::Index end, double* stats);

// For samples [begin, end): the nearest of the k centres (k × d, row-major) and the squared
// distance to it, written to labels[i − begin] and distances[i − begin]; ties go to the lowest
// index.
void nearest_center_range(const double* centers, Eigen::Index k, const Samples& samples,
                          Eigen::Index begin, Eigen::Index end, int* labels, double* distances);

}  // namespace eacgm::detail
