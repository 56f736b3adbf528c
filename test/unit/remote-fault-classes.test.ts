import assert from "../helpers/assert.ts";
import { test } from "node:test";
import { UpstreamFailure } from "../../src/engines/remote/http.ts";
import { refusedByUpstream } from "../../src/engines/remote/wire.ts";

// Which upstream answers blame the request (the client's 400, never counted against the replica)
// and which the replica: the messages are llama-server's own.

test("llama-server's 500 for an embedding input past its physical batch is the input's fault, too long, not the replica's", () => {
  const message = "input (1202 tokens) is too large to process. increase the physical batch size (current batch size: 512)";
  const body = { error: { code: 500, message, type: "server_error" } };
  const failure = new UpstreamFailure("status", message, 500, body);
  assert.equal(failure.contentFault, true);
  assert.equal(failure.retryable, false);
  const refused = refusedByUpstream(500, body, message, "le");
  assert.equal(refused.status, 400);
  assert.equal(refused.code, "context_length_exceeded");
  assert.equal(refused.field, "prompt");
});

test("a 500 that says nothing of the request stays the replica's failure", () => {
  for (const message of ["replica on fire", "input is too large", "the input (many tokens) is too large to process"]) {
    const failure = new UpstreamFailure("status", message, 500, { error: { message } });
    assert.equal(failure.contentFault, false, message);
    assert.equal(failure.retryable, true, message);
  }
});
