/**
 * How a logprob entry names its token on the wire. A control token (`<|im_end|>`) adds no text and
 * no bytes, so its text is `""` like every other control token and like the first bytes of a split
 * character: an alternative list of several `""` entries tells a client nothing. Such a token is
 * named as the vocabulary spells it (vLLM names special tokens the same way); its bytes stay empty
 * (or null where the dialect allows it), since none of them is part of the text.
 */
export function logprobTokenName(t: { token: string; special?: string }): string {
  return t.special ?? t.token;
}

/** The token's bytes, or null for a token with no bytes (the OpenAI schema's "no bytes representation"). */
export function nullableBytes(bytes: number[]): number[] | null {
  return bytes.length > 0 ? bytes : null;
}
