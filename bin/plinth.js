#!/usr/bin/env node
// Entry point for `npx plinth` / a global install: the sources are TypeScript, run through tsx.
import { register } from "tsx/esm/api";

register();
await import("../src/cli/main.ts");
