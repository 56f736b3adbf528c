/**
 * Waits for a generation's first event before a stream's head is written.
 *
 * Until a stream's 200 is sent, a failure can still be answered with its own status: a request that
 * timed out in the model's queue (503 with Retry-After), an upstream pool with no replica left
 * (502/503), a refusal found only once the engine looked at the request. Clients retry those by
 * status (the openai SDKs retry 429 and 5xx); an error event inside a 200 stream they take as final.
 * llama-server answers a stream whose first result is an error the same way. Once the first event
 * is here the generation is under way, and a later failure can only be said inside the stream.
 *
 * Resolves with the same events (the first one included) or rejects with the failure that came
 * before any event. Leaving the returned iterable early (a client gone) closes the original one.
 */
export async function afterFirstEvent<T>(events: AsyncIterable<T>): Promise<AsyncIterable<T>> {
  const it = events[Symbol.asyncIterator]();
  const first = await it.next();
  return (async function* () {
    try {
      if (first.done) return;
      yield first.value;
      for (;;) {
        const next = await it.next();
        if (next.done) return;
        yield next.value;
      }
    } finally {
      await it.return?.();
    }
  })();
}

/** Events that fail at once with `err`: a held stream that still reports its failure inside itself. */
export async function* failingWith<T>(err: unknown): AsyncGenerator<T> {
  throw err;
}
