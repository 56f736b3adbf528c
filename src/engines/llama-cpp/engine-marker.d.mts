export interface EngineMarker {
  decodeThread: boolean;
  nodeLlamaCpp: string;
  /** scripts/engine/addon-edits.mjs's editsFingerprint() at the build; absent in builds before it. */
  edits?: string;
  built: string;
  /** The CMake options the build was made with, which name its folder for node-llama-cpp. */
  cmakeOptions?: Record<string, string>;
}
export function nodeLlamaCppRoot(): string;
export function markerPath(root?: string): string;
export function currentMarker(root?: string): EngineMarker | undefined;
