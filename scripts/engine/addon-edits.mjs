// The edits scripts/engine-build.mjs makes to node-llama-cpp's addon/AddonContext.cpp (3.21.1, pinned)
// for the build: include plinth-decode-thread.h, and run the decode and the sampling through it.
// Kept apart so a test can check them against the installed source.

/** The edits to addon/AddonContext.cpp: each anchor must occur exactly once. */
export const EDITS = [
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
];

export function patchAddonContext(source) {
  let out = source;
  for (const e of EDITS) {
    const at = out.indexOf(e.from);
    if (at === -1 || out.indexOf(e.from, at + 1) !== -1) return { error: `the addon source does not have ${e.what} where this script expects it (node-llama-cpp other than 3.21.1?)` };
    out = out.slice(0, at) + e.to + out.slice(at + e.from.length);
  }
  return { text: out };
}
