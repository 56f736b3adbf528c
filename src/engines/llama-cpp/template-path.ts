import type { ChatWrapperSettings, JinjaTemplateChatWrapper } from "node-llama-cpp";

// node-llama-cpp's Jinja wrapper has two ways with tools: its own (tools described in a system
// message of its own, calls written by itself in the layout it read from the template) and the
// template's (tools, calls and results handed to the template, which writes them). Families whose
// arguments are not one JSON object (XML parameters, Gemma 4's notation) need the template's way
// with the arguments handed over as objects; the wrapper only takes it when its own layout reading
// succeeds, so it is switched here, through fields it does not export.

/** The call layout, as node-llama-cpp's chat wrapper settings describe it. */
export type FunctionsSettings = ChatWrapperSettings["functions"];

interface JinjaInternals {
  _usingJinjaFunctionCallTemplate: boolean;
  _stringifyFunctionParams: boolean;
  _stringifyFunctionResult: boolean;
  _wrapFunctionParamsInsideMapKey: string | undefined;
  settings: ChatWrapperSettings;
}

/**
 * Puts `wrapper` on the template's path with `functions` as its call layout (which the prompt's open
 * turn and the call trigger read; node-llama-cpp never writes calls itself on this path), arguments
 * and results handed over as they are. Returns the call that undoes it. `file` names the caller for
 * the error raised when node-llama-cpp's internals are not what this expects.
 */
export function switchToTemplatePath(wrapper: JinjaTemplateChatWrapper, functions: FunctionsSettings, file: string): () => void {
  const internals = wrapper as unknown as JinjaInternals;
  if (typeof internals._usingJinjaFunctionCallTemplate !== "boolean" || typeof internals.settings !== "object")
    throw new Error(`node-llama-cpp's JinjaTemplateChatWrapper internals changed; ${file} needs updating`);
  const before = {
    settings: internals.settings,
    using: internals._usingJinjaFunctionCallTemplate,
    params: internals._stringifyFunctionParams,
    result: internals._stringifyFunctionResult,
    wrap: internals._wrapFunctionParamsInsideMapKey,
  };
  internals.settings = { ...internals.settings, functions };
  internals._usingJinjaFunctionCallTemplate = true;
  internals._stringifyFunctionParams = false;
  internals._stringifyFunctionResult = false;
  internals._wrapFunctionParamsInsideMapKey = undefined;
  return () => {
    internals.settings = before.settings;
    internals._usingJinjaFunctionCallTemplate = before.using;
    internals._stringifyFunctionParams = before.params;
    internals._stringifyFunctionResult = before.result;
    internals._wrapFunctionParamsInsideMapKey = before.wrap;
  };
}
