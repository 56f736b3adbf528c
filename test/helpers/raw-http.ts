import { connect } from "node:net";

/**
 * Writes `text` to a fresh connection as it is (a request too malformed for an HTTP client to send)
 * and returns everything the server answers until it closes the connection.
 */
export function rawHttp(port: number | string, text: string, timeoutMs = 5_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), "127.0.0.1", () => socket.write(text));
    let got = "";
    socket.on("data", (d) => (got += d.toString("latin1")));
    socket.on("close", () => resolve(got));
    socket.on("error", reject);
    socket.setTimeout(timeoutMs, () => socket.destroy());
  });
}
