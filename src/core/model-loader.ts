/**
 * Loading and unloading models while the server runs (endpoints that name a model file, scale to
 * zero, the admin routes). The core names the contract; the assembly implements it with the engine
 * factories, so dialects can ask for a model without reaching an engine.
 */
export interface ModelLoader {
  /**
   * Serves `source` and resolves with its model id once it is ready: the id of a served model (loaded
   * again if it was unloaded), or a GGUF path or `hf:` reference, registered under `name` (default:
   * the id the source gives). Refuses (ApiError 400/507) before loading when memory is short.
   * Without a name, a source whose id another source holds is a 409, unless `unique`: then the
   * model already loaded from this source is used, or the first free `id-2`, `id-3`…
   */
  load(source: string, opts?: { name?: string; unique?: boolean }): Promise<string>;
  /**
   * The source (a path or `hf:` reference) a model loaded at run time came from, so a caller that
   * names it by id can load it again after a restart; undefined for the models the server started
   * with (the command line serves them again) and for models it does not know.
   */
  sourceOf(id: string): string | undefined;
  /** The source of any model the loader knows, those the server started with included. */
  servedFrom(id: string): string | undefined;
  /**
   * Refuses (ApiError 400 naming `source`) a source that can never load, without loading it: not a
   * .gguf path or hf: reference, or a file that is missing, not a regular file or not a well-formed
   * model (its header is read, never its weights). A served model's id passes.
   */
  check(source: string): Promise<void>;
  /**
   * Frees a model's engine once its running requests are done; a load under way is aborted, and
   * waited for only briefly. With `keep`, the id stays known as
   * `unloaded` (scale to zero) and `load(id)` brings it back; without, it is forgotten.
   */
  unload(id: string, opts?: { keep?: boolean }): Promise<void>;
  /** The source a model was loaded from, when it can be loaded again (every model but scripted ones). */
  canReload(id: string): boolean;
}
