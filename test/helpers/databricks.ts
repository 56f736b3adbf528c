import { requestJson, type TestServer } from "./server.ts";

/** A Databricks-dialect request over HTTP: status, headers, parsed JSON (or the raw text of a stream). */
export interface DbxResult {
  status: number;
  headers: Headers;
  json: any;
  text: string;
}

export function dbx(server: Pick<TestServer, "url">, method: string, path: string, body?: unknown): Promise<DbxResult> {
  return requestJson(`${server.url}${path}`, method, body);
}

/** Polls an endpoint until its state matches (ready and not updating, by default). */
export async function waitForEndpoint(
  server: Pick<TestServer, "url">,
  name: string,
  done: (ep: any) => boolean = (ep) => ep.state.ready === "READY" && ep.state.config_update === "NOT_UPDATING",
  timeoutMs = 30_000,
): Promise<any> {
  const start = Date.now();
  for (;;) {
    const r = await dbx(server, "GET", `/api/2.0/serving-endpoints/${name}`);
    if (r.status === 200 && done(r.json)) return r.json;
    if (Date.now() - start > timeoutMs) throw new Error(`endpoint '${name}' did not reach the expected state: ${r.text}`);
    await new Promise((res) => setTimeout(res, 25));
  }
}

/** The data payloads of an SSE body (`[DONE]` as a string). */
export function sseData(text: string): any[] {
  return text
    .split("\n\n")
    .filter((b) => b.trim() !== "")
    .map((b) => {
      const data = b.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      return data === "[DONE]" ? data : JSON.parse(data);
    });
}
