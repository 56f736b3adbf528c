/** The fields of a Chat Completions or Completions request that say what usage its stream reports. */
interface UsageFields {
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean; continuous_usage_stats?: boolean } | null;
  /** OpenRouter's usage accounting switch. */
  usage?: { include?: boolean } | null;
}

/**
 * What usage a stream reports. `final`: the chunk with no choices and the whole request's usage
 * before `[DONE]` (`stream_options.include_usage`, or OpenRouter's `usage.include`). `continuous`:
 * vLLM's `stream_options.continuous_usage_stats`, usage on every chunk too (each choice's prompt
 * and its completion tokens so far); as in vLLM, only together with the final usage, and otherwise
 * without effect.
 */
export function streamUsage(body: UsageFields): { final: boolean; continuous: boolean } {
  const final = body.stream === true && (body.stream_options?.include_usage === true || body.usage?.include === true);
  return { final, continuous: final && body.stream_options?.continuous_usage_stats === true };
}
