import type { FieldNamer } from "../../core/errors.ts";
import { chatFieldNames } from "../openai/field-names.ts";

/** How SpAk spells canonical fields: OpenAI's chat names, with `max_tokens` the only budget and `thinking` for reasoning. */
export const spakFieldNames: FieldNamer = chatFieldNames({ max_completion_tokens: null }, "thinking");
