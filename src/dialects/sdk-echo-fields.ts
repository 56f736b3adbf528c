import { z } from "zod";

// The openai SDK's helpers (`chat.completions.stream(...).finalChatCompletion()`, `.parse()`,
// `runTools`) hand the caller an assistant message with fields of their own added: `parsed` (the
// content parsed on the client) and `refusal: null`, and on each tool call `function.parsed_arguments`.
// Clients send that message back as the next turn's history. Dialects whose messages refuse unknown
// keys take these: they are copies of what the message already holds, so nothing is lost by not
// reading them; a refusal that is not null is still refused by the dialect that cannot take one.

/** `refusal: null` and `parsed` on a message sent back. */
export const sdkMessageEchoes = { refusal: z.null().optional(), parsed: z.unknown().optional() };

/** `parsed_arguments` on a sent-back tool call's function. */
export const sdkFunctionEchoes = { parsed_arguments: z.unknown().optional() };
