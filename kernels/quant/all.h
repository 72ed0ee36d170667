// Every weight type's reader, and the lists the kernel families instantiate
// their variants from: X(suffix, type) per weight type, suffixes as the
// Vulkan pipeline variants (crates/rocmforge-vulkan/build.rs) and
// rocmforge_core::gpu::weight_suffix name them.
#pragma once

#include "f32.h"
#include "f16.h"
#include "bf16.h"
#include "q4_0.h"
#include "q4_1.h"
#include "q5_0.h"
#include "q5_1.h"
#include "q8_0.h"
#include "q2_k.h"
#include "q3_k.h"
#include "q4_k.h"
#include "q5_k.h"
#include "q6_k.h"
#include "iq4_nl.h"
#include "iq4_xs.h"
#include "mxfp4.h"
#include "iq2_xxs.h"
#include "iq2_xs.h"
#include "iq2_s.h"
#include "iq3_xxs.h"
#include "iq3_s.h"
#include "iq1_s.h"
#include "iq1_m.h"
#include "tq1_0.h"
#include "tq2_0.h"

// All twenty-five weight types.
#define RF_WEIGHT_TYPES(X)                                                                          \
    X(f32, quant::F32)                                                                              \
    X(f16, quant::F16)                                                                              \
    X(bf16, quant::BF16)                                                                            \
    X(q4_0, quant::Q4_0)                                                                            \
    X(q4_1, quant::Q4_1)                                                                            \
    X(q5_0, quant::Q5_0)                                                                            \
    X(q5_1, quant::Q5_1)                                                                            \
    X(q8_0, quant::Q8_0)                                                                            \
    X(q2_k, quant::Q2_K)                                                                            \
    X(q3_k, quant::Q3_K)                                                                            \
    X(q4_k, quant::Q4_K)                                                                            \
    X(q5_k, quant::Q5_K)                                                                            \
    X(q6_k, quant::Q6_K)                                                                            \
    X(iq4_nl, quant::IQ4_NL)                                                                        \
    X(iq4_xs, quant::IQ4_XS)                                                                        \
    X(mxfp4, quant::MXFP4)                                                                          \
    X(iq2_xxs, quant::IQ2_XXS)                                                                      \
    X(iq2_xs, quant::IQ2_XS)                                                                        \
    X(iq2_s, quant::IQ2_S)                                                                          \
    X(iq3_xxs, quant::IQ3_XXS)                                                                      \
    X(iq3_s, quant::IQ3_S)                                                                          \
    X(iq1_s, quant::IQ1_S)                                                                          \
    X(iq1_m, quant::IQ1_M)                                                                          \
    X(tq1_0, quant::TQ1_0)                                                                          \
    X(tq2_0, quant::TQ2_0)

// The types with an integer form (block_q8): rocmforge_core::gpu::has_int_form.
#define RF_INT_WEIGHT_TYPES(X)                                                                      \
    X(q4_0, quant::Q4_0)                                                                            \
    X(q4_1, quant::Q4_1)                                                                            \
    X(q5_0, quant::Q5_0)                                                                            \
    X(q5_1, quant::Q5_1)                                                                            \
    X(q8_0, quant::Q8_0)                                                                            \
    X(iq4_nl, quant::IQ4_NL)                                                                        \
    X(mxfp4, quant::MXFP4)
