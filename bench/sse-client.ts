/** A streaming request as the benchmarks read it: when content started and ended, and the usage. */
export interface StreamTiming {
  /** performance.now() at the first and last content delta. */
  first: number;
  last: number;
  usage: { completion_tokens: number; prompt_tokens: number; prompt_tokens_details?: { cached_tokens: number } };
}

/**
 * POSTs a streaming chat completion and times it. Kept cheap on purpose: on a small machine the
 * client's own CPU use slows the server it measures, so chunks are scanned, not parsed.
 */
export async function streamChat(url: string, body: Record<string, unknown>): Promise<StreamTiming> {
  const res = await postOnce(`${url}/v1/chat/completions`, JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }));
  if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let usageEvent = "";
  let first = 0;
  let last = 0;
  let deltas = 0;
  await eachEvent(res.body, (event) => {
    if (event.includes('"delta":{"content":"') || event.includes('"delta":{"reasoning_content":"')) {
      const now = performance.now();
      if (!first) first = now;
      last = now;
      deltas++;
    }
    // Some servers (llama-server) put the usage on the last content chunk rather than after it.
    if (event.includes('"usage":{')) usageEvent = event;
  });
  // A server that reports no usage at all is counted by its deltas, one token each.
  const usage = usageEvent ? JSON.parse(usageEvent.slice("data: ".length)).usage : { completion_tokens: deltas, prompt_tokens: 0 };
  return { first, last, usage };
}

/**
 * POSTs a streaming Responses API request and times it the same way: the first and last
 * `output_text` delta, and the usage of the closing event.
 */
export async function streamResponse(url: string, body: Record<string, unknown>): Promise<StreamTiming> {
  const res = await fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true }),
  });
  if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let closing = "";
  let first = 0;
  let last = 0;
  await eachEvent(res.body, (event) => {
    if (event.startsWith("event: response.output_text.delta")) {
      const now = performance.now();
      if (!first) first = now;
      last = now;
    } else if (event.startsWith("event: response.completed") || event.startsWith("event: response.incomplete")) closing = event;
  });
  const data = JSON.parse(closing.slice(closing.indexOf("data: ") + "data: ".length));
  const u = data.response.usage;
  return { first, last, usage: { completion_tokens: u.output_tokens, prompt_tokens: u.input_tokens } };
}

/**
 * POSTs JSON, sending it again (up to twice) when the connection was closed before any answer:
 * llama-server closes a keep-alive connection after a number of requests, and a request that the
 * client put on it at that moment fails with "other side closed" without having reached the server.
 * With eight streams at once, the resend can land on another connection closing at the same moment
 * (seen in two eight-stream runs in a row, each of which ended the whole benchmark).
 */
async function postOnce(url: string, body: string): Promise<Response> {
  const send = () => fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body });
  for (let attempt = 1; ; attempt++) {
    try {
      return await send();
    } catch (err) {
      const code = (err as { cause?: { code?: string } }).cause?.code;
      if ((code !== "UND_ERR_SOCKET" && code !== "ECONNRESET") || attempt >= 3) throw err;
    }
  }
}

/** Calls `onEvent` with each raw SSE event (the text between blank lines) as it arrives. */
async function eachEvent(body: ReadableStream<Uint8Array>, onEvent: (event: string) => void): Promise<void> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const bytes of body) {
    pending += decoder.decode(bytes, { stream: true });
    let at: number;
    while ((at = pending.indexOf("\n\n")) !== -1) {
      onEvent(pending.slice(0, at));
      pending = pending.slice(at + 2);
    }
  }
}

/** One round of `concurrency` identical streamed chats started together. */
export interface ChatRound {
  /** Completion tokens of all streams ÷ the round's wall time (first request to last token). */
  aggregate: number;
  /** Each stream's time to first token, in ms from the round's start. */
  ttfts: number[];
}

/** Streams the same chat `concurrency` times at once to `url` (model "bench") and times the round. */
export async function chatRound(url: string, concurrency: number, body: Record<string, unknown>): Promise<ChatRound> {
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: concurrency }, () => streamChat(url, { model: "bench", ...body })));
  const wall = (Math.max(...results.map((r) => r.last)) - t0) / 1000;
  const tokens = results.reduce((a, r) => a + r.usage.completion_tokens, 0);
  return { aggregate: tokens / wall, ttfts: results.map((r) => r.first - t0) };
}
