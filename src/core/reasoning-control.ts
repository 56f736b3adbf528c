import type { GenerationRequest } from "./types.ts";

/**
 * A reasoning control that asks for no thinking at all (`enabled: false`, from `reasoning_effort:
 * "none"`, `enable_thinking: false`, `thinking: {type: "disabled"}`, …) with no budget. A model
 * without a thinking section already does what it asks, so such a request is served as it is
 * rather than refused: clients send `enable_thinking: false` to every model they use.
 */
export function asksNoThinking(reasoning: GenerationRequest["reasoning"]): boolean {
  return reasoning !== undefined && reasoning.enabled === false && reasoning.budgetTokens === undefined;
}
