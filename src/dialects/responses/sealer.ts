/** Seals and opens reasoning text for `reasoning.encrypted_content`. */
export interface Sealer {
  seal(text: string): string;
  /** Throws when the text was not sealed by this server or was altered. */
  open(sealed: string): string;
}
