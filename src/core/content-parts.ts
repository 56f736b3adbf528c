import { invalidField } from "./errors.ts";
import type { ContentPart, ImagePart, Message } from "./types.ts";

/**
 * Helpers for messages that hold more than text. Dialects build `parts` with `withParts`; engines
 * that read text only call `refuseImages` so an image is refused by its position, never dropped.
 */

/** A message's `content` and, when any part is not text, its `parts`. */
export function withParts(parts: ContentPart[]): Pick<Message, "content" | "parts"> {
  const content = parts
    .filter((p): p is Extract<ContentPart, { type: "text" }> => p.type === "text")
    .map((p) => p.text)
    .join("\n");
  return parts.some((p) => p.type !== "text") ? { content, parts } : { content };
}

/** Every image in the prompt, with its message and part positions. */
export function* imagesIn(messages: readonly Message[]): Generator<{ message: number; part: number; image: ImagePart }> {
  for (const [i, m] of messages.entries()) {
    for (const [j, p] of (m.parts ?? []).entries()) if (p.type === "image") yield { message: i, part: j, image: p };
  }
}

export function hasImages(messages: readonly Message[]): boolean {
  return !imagesIn(messages).next().done;
}

/** For engines whose model reads text only: a 400 naming the first image part. */
export function refuseImages(messages: readonly Message[], model: string): void {
  const first = imagesIn(messages).next();
  if (first.done) return;
  const { message, part } = first.value;
  throw invalidField(`{field} is an image, but the model '${model}' reads text only.`, `prompt.messages[${message}].parts[${part}]`, "unsupported_content");
}
