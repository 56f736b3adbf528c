#pragma once
// Compiled into node-llama-cpp's addon by `npm run engine:build` (scripts/engine-build.mjs), which
// includes this header in addon/AddonSampler.cpp and has AddonSampler::setTokenCandidates fill this
// buffer instead of the sampler's own vector.
//
// Why: the addon gives every sampler a vocabulary-sized candidate vector, filled in its constructor,
// and node-llama-cpp makes a sampler per generation request. With a 32k vocabulary that constructor
// took ~1.9 ms of the JavaScript thread per request, nearly all of it page faults on fresh memory
// (`perf`: the faults inside std::vector::_M_default_append). The candidates are only read during
// one sampling call, on the thread that makes it, so one buffer per thread, kept and reused, does
// the same job without faulting.
#include <vector>
#include "llama.h"

namespace plinth {

inline std::vector<llama_token_data>& samplerCandidates() {
    thread_local std::vector<llama_token_data> buffer;
    return buffer;
}

}  // namespace plinth
