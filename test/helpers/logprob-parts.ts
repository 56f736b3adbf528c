import assert from "./assert.ts";
import type { ChatBody, PlinthHttp, WireLogprob } from "./requests.ts";

/** One part of a chat answer: its text, and the tokens its logprob entries list. */
export interface LogprobPart {
  text: string;
  tokens: string[];
}

const spelled = (entries: WireLogprob[]) => Buffer.from(entries.flatMap((e) => e.bytes ?? [])).toString();

/**
 * Asks for `body` with logprobs, whole and streamed, and checks what holds for every answer: the
 * bytes of each part's entries spell that part's text, and the stream lists the same entries as the
 * whole answer. Returns the parts (the whole answer's) for the caller's own checks.
 */
export async function logprobParts(http: PlinthHttp, body: ChatBody): Promise<{ content: LogprobPart; reasoning: LogprobPart }> {
  const whole = (await http.chat({ ...body, logprobs: true })).choices[0];
  const lp = whole.logprobs!;
  const content = { text: whole.message.content ?? "", entries: lp.content ?? [] };
  const reasoning = { text: whole.message.reasoning_content ?? "", entries: lp.reasoning_content ?? [] };
  const seen = JSON.stringify(whole).slice(0, 1500);
  assert.equal(spelled(content.entries), content.text, `content logprobs spell the content: ${seen}`);
  assert.equal(spelled(reasoning.entries), reasoning.text, `reasoning logprobs spell the reasoning: ${seen}`);

  const stream = await http.chatStream({ ...body, logprobs: true });
  const streamed = { content: [] as string[], reasoning: [] as string[] };
  for (const chunk of stream.chunks) {
    const choice = chunk.choices.find((c) => c.index === 0);
    for (const e of choice?.logprobs?.content ?? []) streamed.content.push(e.token);
    for (const e of choice?.logprobs?.reasoning_content ?? []) streamed.reasoning.push(e.token);
  }
  const parts = {
    content: { text: content.text, tokens: content.entries.map((e) => e.token) },
    reasoning: { text: reasoning.text, tokens: reasoning.entries.map((e) => e.token) },
  };
  assert.deepEqual(
    { content: { text: stream.content, tokens: streamed.content }, reasoning: { text: stream.reasoning, tokens: streamed.reasoning } },
    parts,
    "streamed as whole",
  );
  return parts;
}
