#pragma once
// Compiled into node-llama-cpp's addon by scripts/engine-build.mjs (included in
// addon/AddonContext.cpp after plinth-decode-thread.h and plinth-presample.h).
//
// Why: the stock decodeBatch queues a libuv work item, whose worker hands the decode to the decode
// thread and sleeps until it is done, then wakes the JavaScript thread through libuv. On a 2-core
// machine that worker is a fourth thread wanting a core beside the JavaScript thread and the two
// decoding threads, twice per token; and queueing the work item takes libuv's pool lock, which a
// worker that lost its core while holding it keeps for a scheduler tick: measured at one stream,
// 14 % of decodeBatch calls held the JavaScript thread for more than 1 ms (9 % more than 3 ms)
// before the decode was even queued. Here the JavaScript thread queues the decode on the decode
// thread itself, and the decode thread settles the promise through one thread-safe function.
// PLINTH_DECODE_INLINE=1 (no decode thread) and PLINTH_DIRECT_DECODE=0 keep the stock worker.
#include <cstdlib>
#include <string>

namespace plinth {

struct DirectDecode {
    Napi::ObjectReference context;  // keeps the context object alive until the promise settles
    Napi::Promise::Deferred deferred;
    std::string error;  // empty: the decode succeeded
    explicit DirectDecode(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
};

// PLINTH_DIRECT_DECODE=0 queues decodes through the stock worker again (for side-by-side runs).
inline bool directDecodeOff() {
    static const bool value = [] {
        const char* v = std::getenv("PLINTH_DIRECT_DECODE");
        return v != nullptr && v[0] == '0';
    }();
    return value;
}

inline void settleDirectDecode(Napi::Env env, Napi::Function, void*, DirectDecode* decode);
using DirectDecodeSettler = Napi::TypedThreadSafeFunction<void, DirectDecode, settleDirectDecode>;

struct DirectDecodeChannel {
    napi_env env = nullptr;
    DirectDecodeSettler settler;
    // Decodes queued and not yet settled; the channel keeps the event loop alive only while some are.
    int inFlight = 0;
};

// Its environment and count belong to the JavaScript thread; the decode thread only reads the
// settler, which is set before the first decode is queued.
inline DirectDecodeChannel& directDecodeChannel() {
    static DirectDecodeChannel* channel = new DirectDecodeChannel();
    return *channel;
}

inline void settleDirectDecode(Napi::Env env, Napi::Function, void*, DirectDecode* decode) {
    if (env != nullptr) {
        Napi::HandleScope scope(env);
        if (decode->error.empty()) decode->deferred.Resolve(env.Undefined());
        else decode->deferred.Reject(Napi::Error::New(env, decode->error).Value());
        auto& channel = directDecodeChannel();
        if (--channel.inFlight == 0) channel.settler.Unref(env);
        delete decode;
    }
    // Without an environment the process is tearing the channel down: the references it holds can no
    // longer be released, so the record is left as it is.
}

// AddonContext.decodeBatch on the JavaScript thread: the decode (with the sampling ahead that follows
// it) is queued on the decode thread, and the returned promise settles when it is done, as the stock
// worker's does. Returns an empty value where the direct path cannot be used (the caller then
// queues the stock worker).
template <typename Context>
Napi::Value decodeBatchDirect(Context* ctx, const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto& channel = directDecodeChannel();
    if (channel.env == nullptr) {
        channel.settler = DirectDecodeSettler::New(env, "plinthDirectDecode", 0, 1);
        channel.settler.Unref(env);
        channel.env = env;
    } else if (channel.env != static_cast<napi_env>(env)) {
        return Napi::Value();  // another environment (a worker thread): the stock path
    }
    auto* decode = new DirectDecode(env);
    decode->context = Napi::Persistent(info.This().As<Napi::Object>());
    Napi::Promise promise = decode->deferred.Promise();
    if (channel.inFlight++ == 0) channel.settler.Ref(env);
    decodeThread().post(
        [ctx, decode] {
            try {
                const int r = llama_decode(ctx->ctx, ctx->batch);
                if (r == 1) {
                    decode->error = "could not find a KV slot for the batch (try reducing the size of the batch or increase the context)";
                } else if (r != 0) {
                    decode->error = "Eval has failed";
                } else {
                    llama_synchronize(ctx->ctx);
                    presampleAfterDecode(ctx);
                }
            } catch (const std::exception& e) {
                decode->error = e.what();
                if (decode->error.empty()) decode->error = "Unknown error when calling \"llama_decode\"";
            } catch (...) {
                decode->error = "Unknown error when calling \"llama_decode\"";
            }
        },
        [decode] {
            // Fails only while the process is closing the channel; the decode is then left unsettled.
            directDecodeChannel().settler.NonBlockingCall(decode);
        });
    return promise;
}

}  // namespace plinth
