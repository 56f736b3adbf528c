import type { GenerationEvent, PartKind } from "./types.ts";

/**
 * Brackets each part of every choice with `part-start` and `part-end`, from the deltas alone: a part
 * opens with its first non-empty delta and closes when another part opens or the choice finishes.
 * Engines therefore only report deltas (and a tool call's start); every renderer gets the brackets.
 */
export class PartTracker {
  private readonly open = new Map<number, { part: PartKind; index?: number }>();

  /** The events to send for `ev`: any brackets it implies, then the event itself. */
  track(ev: GenerationEvent): GenerationEvent[] {
    switch (ev.type) {
      case "text":
      case "reasoning":
        if (ev.text === "" && !ev.logprobs) return [ev];
        return [...this.switchTo(ev.choice, ev.type), ev];
      case "tool-call":
        return [...this.close(ev.choice), ev].concat(this.opened(ev.choice, "tool-call", ev.index));
      case "finish":
        // Parts cut short by the token budget or by an upstream's content filter end incomplete.
        return [...this.close(ev.choice, ev.reason === "length" || ev.reason === "content_filter"), ev];
      default:
        return [ev];
    }
  }

  private switchTo(choice: number, part: "text" | "reasoning"): GenerationEvent[] {
    if (this.open.get(choice)?.part === part) return [];
    return [...this.close(choice), { type: "part-start", choice, part }, ...this.opened(choice, part)];
  }

  private opened(choice: number, part: PartKind, index?: number): GenerationEvent[] {
    this.open.set(choice, { part, index });
    return [];
  }

  private close(choice: number, cutShort = false): GenerationEvent[] {
    const current = this.open.get(choice);
    if (!current) return [];
    this.open.delete(choice);
    return [
      {
        type: "part-end",
        choice,
        part: current.part,
        ...(current.index !== undefined ? { index: current.index } : {}),
        ...(cutShort ? { incomplete: true } : {}),
      },
    ];
  }
}
