import { ApiError } from "../../core/errors.ts";

/**
 * Item ids that running turns will append to their conversation. A turn is refused before it
 * generates when an id of its input is already in the conversation; a turn still running has not
 * appended its items yet, so a concurrent turn with the same id passed that check and failed only
 * when storing its finished answer (a 409 after the work was done, the turn lost). Each turn claims
 * its ids here until its items are stored; one server per data directory, so this process sees
 * every running turn.
 */
export class ConversationClaims {
  private readonly claimed = new Map<string, Set<string>>();
  /** Conversations a stored turn is running on (see `lock`). */
  private readonly locked = new Set<string>();

  /**
   * Takes the conversation for one turn, from before it reads the history until its items are
   * appended, or refuses with OpenAI's 400 `conversation_locked` while another turn has it. Two
   * turns at once each read the same history and then appended their items one after the other,
   * so the stored history held answers to turns their model never saw. Returns the release, which
   * can be called more than once.
   */
  lock(ns: string, conversationId: string, param: string | null = "conversation"): () => void {
    const key = `${ns}\u0000${conversationId}`;
    this.refuseIfLocked(ns, conversationId, param);
    this.locked.add(key);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.locked.delete(key);
    };
  }

  /** Refuses while the conversation is taken (a turn runs on it, or items are being added). */
  refuseIfLocked(ns: string, conversationId: string, param: string | null): void {
    if (this.locked.has(`${ns}\u0000${conversationId}`))
      throw new ApiError(400, `Another request is changing the conversation '${conversationId}' (a response running on it, or items being added); try again once it has finished.`, {
        param,
        code: "conversation_locked",
      });
  }

  /** Whether a running turn holds `id` for the conversation. */
  holds(ns: string, conversationId: string, id: string): boolean {
    return this.claimed.get(`${ns}\u0000${conversationId}`)?.has(id) ?? false;
  }

  /**
   * Claims `ids` (each with the input position that gave it) in the conversation, or refuses the
   * first one another running turn holds with a 400 naming it. Returns the release, which can be
   * called more than once.
   */
  claim(ns: string, conversationId: string, ids: Array<{ id: string; at: number }>): () => void {
    const key = `${ns}\u0000${conversationId}`;
    const held = this.claimed.get(key) ?? new Set<string>();
    for (const { id, at } of ids)
      if (held.has(id))
        throw new ApiError(400, `An item with id '${id}' is being added to the conversation '${conversationId}' by a turn still running; leave the id out, or wait for that turn.`, {
          param: `input[${at}].id`,
          code: "conflict",
        });
    for (const { id } of ids) held.add(id);
    this.claimed.set(key, held);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const { id } of ids) held.delete(id);
      if (held.size === 0 && this.claimed.get(key) === held) this.claimed.delete(key);
    };
  }
}
