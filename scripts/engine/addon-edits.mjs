// The edits scripts/engine-build.mjs makes to node-llama-cpp's addon sources (3.21.1, pinned) for
// the build, per file, with the headers each one includes: the decode thread
// (plinth-decode-thread.h), sampling on it right after the decode (plinth-presample.h), decodes
// queued on it without a libuv worker (plinth-direct-decode.h) and a
// per-thread sampler candidate buffer (plinth-sampler-buffer.h).
// Kept apart so a test can check them against the installed sources.
import { createHash } from "node:crypto";
import fs from "node:fs";

/** Per addon source file: the headers it gets, and its edits (each anchor must occur exactly once). */
export const ADDON_EDITS = {
  "AddonContext.cpp": {
    headers: ["plinth-decode-thread.h", "plinth-presample.h", "plinth-direct-decode.h"],
    edits: [
      {
        what: "the header",
        from: '#include "AddonContext.h"\n',
        to: '#include "AddonContext.h"\n#include "plinth-decode-thread.h"\n#include "plinth-presample.h"\n#include "plinth-direct-decode.h"\n',
      },
      {
        what: "the decode",
        from: "int r = llama_decode(ctx->ctx, ctx->batch);",
        to:
          "int r = 0;\n                plinth::onDecodeThread([&] {\n                    r = llama_decode(ctx->ctx, ctx->batch);\n" +
          "                    if (r == 0) {\n                        llama_synchronize(ctx->ctx);\n                        plinth::presampleAfterDecode(ctx);\n                    }\n                });",
      },
      {
        what: "the batch's start",
        from: "    batch = llama_batch_init(n_tokens, 0, 1);\n",
        to: "    batch = llama_batch_init(n_tokens, 0, 1);\n    plinth::newBatch(this);\n",
      },
      {
        what: "the batch's logit rows",
        from: "            resLogitIndexes[l] = batch.n_tokens - 1;\n",
        to: "            resLogitIndexes[l] = batch.n_tokens - 1;\n            plinth::noteLogitRow(this, sequenceId, batch.n_tokens - 1);\n",
      },
      {
        what: "the decode call",
        from: "    AddonContextDecodeBatchWorker* worker = new AddonContextDecodeBatchWorker(info.Env(), this);\n",
        to:
          "    if (!plinth::decodeInline() && !plinth::directDecodeOff()) {\n" +
          "        Napi::Value direct = plinth::decodeBatchDirect(this, info);\n" +
          "        if (!direct.IsEmpty()) return direct;\n" +
          "    }\n" +
          "    AddonContextDecodeBatchWorker* worker = new AddonContextDecodeBatchWorker(info.Env(), this);\n",
      },
      {
        what: "the sampling call",
        from: "    AddonContextSampleTokenWorker* worker = new AddonContextSampleTokenWorker(info, this);\n",
        to:
          "    if (info.Length() == 2 && info[0].IsNumber() && info[1].IsObject()) {\n" +
          "        llama_token presampled;\n" +
          "        if (plinth::takePresampled(this, info[0].As<Napi::Number>().Int32Value(), Napi::ObjectWrap<AddonSampler>::Unwrap(info[1].As<Napi::Object>()), presampled)) {\n" +
          "            auto deferred = Napi::Promise::Deferred::New(info.Env());\n" +
          "            deferred.Resolve(presampled < 0 ? Napi::Number::New(info.Env(), -1) : Napi::Number::New(info.Env(), static_cast<uint32_t>(presampled)));\n" +
          "            return deferred.Promise();\n" +
          "        }\n" +
          "    }\n" +
          "    AddonContextSampleTokenWorker* worker = new AddonContextSampleTokenWorker(info, this);\n",
      },
      {
        what: "the class's methods",
        from: '                InstanceMethod("sampleToken", &AddonContext::SampleToken),\n',
        to:
          '                InstanceMethod("sampleToken", &AddonContext::SampleToken),\n' +
          '                StaticMethod("plinthArmSampler", &plinth::armSampler<AddonContext>),\n' +
          '                StaticMethod("plinthDisarmSampler", &plinth::disarmSampler<AddonContext>),\n',
      },
      {
        what: "the sampling",
        from: "            try {\n                SampleToken();\n",
        to: "            try {\n                plinth::sampleOnDecodeThreadIfIdle([&] { SampleToken(); });\n",
      },
    ],
  },
  "AddonSampler.cpp": {
    headers: ["plinth-sampler-buffer.h"],
    edits: [
      {
        what: "the header",
        from: '#include "AddonSampler.h"\n',
        to: '#include "AddonSampler.h"\n#include "plinth-sampler-buffer.h"\n',
      },
      {
        what: "the constructor's candidate vector",
        from: "    tokenCandidates.resize(llama_vocab_n_tokens(model->vocab));\n    tokenCandidates.reserve(llama_vocab_n_tokens(model->vocab));\n",
        to: "",
      },
      {
        what: "the candidates' fill",
        from: "llama_token_data_array& curP) {\n    const float* sampledProbs",
        // The local reference stands in for the member of the same name in the rest of the function.
        to: "llama_token_data_array& curP) {\n    std::vector<llama_token_data>& tokenCandidates = plinth::samplerCandidates();\n    const float* sampledProbs",
      },
    ],
  },
};

/** Applies one file's edits; `{ error }` names the first anchor that is missing or not unique. */
export function patchAddonSource(file, source) {
  const plan = ADDON_EDITS[file];
  if (!plan) return { error: `no edits for ${file}` };
  let out = source;
  for (const e of plan.edits) {
    const at = out.indexOf(e.from);
    if (at === -1 || out.indexOf(e.from, at + 1) !== -1)
      return { error: `the addon's ${file} does not have ${e.what} where this script expects it (node-llama-cpp other than 3.21.1?)` };
    out = out.slice(0, at) + e.to + out.slice(at + e.from.length);
  }
  return { text: out };
}

/**
 * A digest of these edits and the headers they include. The build's marker keeps it, so an install
 * over a build made with other edits (an older Plinth) builds again instead of keeping it.
 */
export function editsFingerprint() {
  const hash = createHash("sha256");
  hash.update(fs.readFileSync(new URL(import.meta.url)));
  const headers = [...new Set(Object.values(ADDON_EDITS).flatMap((plan) => plan.headers))].sort();
  for (const h of headers) hash.update(h).update(fs.readFileSync(new URL(h, import.meta.url)));
  return hash.digest("hex").slice(0, 16);
}
