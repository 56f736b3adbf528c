// The edits scripts/engine-build.mjs makes to node-llama-cpp's addon sources (3.21.1, pinned) for
// the build, per file, with the headers each one includes: the decode thread
// (plinth-decode-thread.h) and a per-thread sampler candidate buffer (plinth-sampler-buffer.h).
// Kept apart so a test can check them against the installed sources.

/** Per addon source file: the headers it gets, and its edits (each anchor must occur exactly once). */
export const ADDON_EDITS = {
  "AddonContext.cpp": {
    headers: ["plinth-decode-thread.h"],
    edits: [
      {
        what: "the header",
        from: '#include "AddonContext.h"\n',
        to: '#include "AddonContext.h"\n#include "plinth-decode-thread.h"\n',
      },
      {
        what: "the decode",
        from: "int r = llama_decode(ctx->ctx, ctx->batch);",
        to: "int r = 0;\n                plinth::onDecodeThread([&] {\n                    r = llama_decode(ctx->ctx, ctx->batch);\n                    if (r == 0) llama_synchronize(ctx->ctx);\n                });",
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
