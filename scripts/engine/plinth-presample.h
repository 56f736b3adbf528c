#pragma once
// Compiled into node-llama-cpp's addon by `npm run engine:build` (scripts/engine-build.mjs), which
// includes this header in addon/AddonContext.cpp, notes each batch's logit rows in addToBatch, runs
// presampleAfterDecode inside the decode job and lets sampleToken hand over a token sampled there.
//
// Why: the stock addon samples in a second native call. After each decode the JavaScript thread
// wakes up, asks for the sample, a libuv worker passes it to the decode thread, and the token comes
// back through the worker to the JavaScript thread again: two more thread hand-offs and an event-loop
// turn between a decode and the next one, on every token. Measured on the 2-core VM at one stream:
// 0.175 ms (median) and 0.53 ms (mean) per token, against decodes of ~7 ms (docs/benchmarks.md).
// llama-server samples in the loop that decodes. Here a sequence's sampler is armed (from
// JavaScript, before its decode is queued, with its configuration already applied); the decode job
// then samples every armed sequence's logit row on the decode thread right after llama_decode, and
// sampleToken for that row returns the token at once, without a worker.
//
// A row is sampled ahead only for a call of the shape the sampler-only path uses (a batch logit
// index and a sampler; no probabilities or confidence), and only with the sampler that was armed;
// any other call runs the stock worker. An error while sampling ahead leaves no result, so the stock
// worker runs the sampling again and reports it.
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>
#include "llama.h"
#include "napi.h"
#include "AddonSampler.h"

class AddonContext;

namespace plinth {

struct Presampled {
    AddonSampler* sampler;
    llama_token token;  // -1: the sampler had nothing to offer (the stock call's "no output")
};

struct PresampleState {
    // Sequence id -> the sampler of its running generation (held with a reference).
    std::unordered_map<int32_t, AddonSampler*> armed;
    // The current batch's logit rows: (sequence id, batch logit index).
    std::vector<std::pair<int32_t, int32_t>> rows;
    // Batch logit index -> the token sampled there.
    std::unordered_map<int32_t, Presampled> results;
};

inline std::mutex& presampleMutex() {
    static std::mutex* mutex = new std::mutex();
    return *mutex;
}

// Keyed by context; an entry stays (empty) after its context is gone, which costs a few bytes.
inline PresampleState& presampleState(const AddonContext* ctx) {
    static auto* states = new std::unordered_map<const AddonContext*, PresampleState>();
    return (*states)[ctx];
}

// JavaScript thread: a new batch starts; rows and results of the last one are over (node-llama-cpp
// waits for every sampling of a batch before it starts the next).
inline void newBatch(const AddonContext* ctx) {
    std::lock_guard<std::mutex> lock(presampleMutex());
    auto& state = presampleState(ctx);
    state.rows.clear();
    state.results.clear();
}

// JavaScript thread: addToBatch put a row with logits for `sequenceId` at `batchLogitIndex`.
inline void noteLogitRow(const AddonContext* ctx, int32_t sequenceId, int32_t batchLogitIndex) {
    std::lock_guard<std::mutex> lock(presampleMutex());
    presampleState(ctx).rows.emplace_back(sequenceId, batchLogitIndex);
}

// Decode thread, right after a successful llama_decode: samples every armed sequence's rows the way
// the stock sampleToken worker does without probabilities, and keeps the tokens for sampleToken.
template <typename Context>
void presampleAfterDecode(Context* ctx) {
    std::lock_guard<std::mutex> lock(presampleMutex());
    auto& state = presampleState(ctx);
    if (state.armed.empty() || state.rows.empty()) return;
    if (llama_get_logits(ctx->ctx) == nullptr) return;
    for (const auto& [sequenceId, batchLogitIndex] : state.rows) {
        auto armed = state.armed.find(sequenceId);
        if (armed == state.armed.end()) continue;
        AddonSampler* sampler = armed->second;
        if (sampler->disposed) continue;
        try {
            sampler->rebuildChainIfNeeded();
            llama_token_data_array cur_p;
            sampler->sample(ctx->ctx, batchLogitIndex, cur_p, false);
            if (cur_p.size == 0 || !(cur_p.selected >= 0 && cur_p.selected < (int32_t)cur_p.size)) {
                state.results[batchLogitIndex] = {sampler, -1};
                continue;
            }
            const llama_token token = cur_p.data[cur_p.selected].id;
            sampler->acceptToken(token);
            state.results[batchLogitIndex] = {sampler, token};
        } catch (...) {
            // No result: the stock worker samples this row again and reports the error.
        }
    }
}

// JavaScript thread, in sampleToken: the token sampled ahead for this row with this sampler, if any.
inline bool takePresampled(const AddonContext* ctx, int32_t batchLogitIndex, AddonSampler* sampler, llama_token& token) {
    std::lock_guard<std::mutex> lock(presampleMutex());
    auto& state = presampleState(ctx);
    auto found = state.results.find(batchLogitIndex);
    if (found == state.results.end() || found->second.sampler != sampler) return false;
    token = found->second.token;
    state.results.erase(found);
    return true;
}

// AddonContext.plinthArmSampler(context, sequenceId, sampler): from the next decode on, rows of
// this sequence are sampled on the decode thread with this sampler, whose configuration must be
// final by the time the decode is queued.
template <typename Context>
Napi::Value armSampler(const Napi::CallbackInfo& info) {
    Context* ctx = Napi::ObjectWrap<Context>::Unwrap(info[0].As<Napi::Object>());
    const int32_t sequenceId = info[1].As<Napi::Number>().Int32Value();
    AddonSampler* sampler = Napi::ObjectWrap<AddonSampler>::Unwrap(info[2].As<Napi::Object>());
    AddonSampler* previous = nullptr;
    {
        std::lock_guard<std::mutex> lock(presampleMutex());
        auto& slot = presampleState(ctx).armed[sequenceId];
        previous = slot;
        slot = sampler;
    }
    if (previous != sampler) {
        sampler->Ref();
        if (previous != nullptr) previous->Unref();
    }
    return info.Env().Undefined();
}

// AddonContext.plinthDisarmSampler(context, sequenceId): back to the stock path. Waits for a
// sampling ahead in progress, so the sampler may be disposed right after.
template <typename Context>
Napi::Value disarmSampler(const Napi::CallbackInfo& info) {
    Context* ctx = Napi::ObjectWrap<Context>::Unwrap(info[0].As<Napi::Object>());
    const int32_t sequenceId = info[1].As<Napi::Number>().Int32Value();
    AddonSampler* previous = nullptr;
    {
        std::lock_guard<std::mutex> lock(presampleMutex());
        auto& state = presampleState(ctx);
        auto armed = state.armed.find(sequenceId);
        if (armed != state.armed.end()) {
            previous = armed->second;
            state.armed.erase(armed);
        }
        for (auto it = state.results.begin(); it != state.results.end();) {
            if (it->second.sampler == previous) it = state.results.erase(it);
            else ++it;
        }
    }
    if (previous != nullptr) previous->Unref();
    return info.Env().Undefined();
}

}  // namespace plinth
