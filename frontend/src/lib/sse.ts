// Server-Sent Events over fetch(): EventSource cannot send an Authorization header.
// `SseParser` is the text/event-stream grammar (WHATWG HTML §9.2.6) fed with arbitrary
// chunks; `connectSse` keeps a stream open, reconnecting with Last-Event-ID.

export interface SseEvent {
  /** The event type; "message" when the stream named none. */
  event: string;
  data: string;
  /** The last event id seen so far on the stream (ids persist across events). */
  id: string;
}

/** Incremental parser: feed it decoded text in chunks of any size. Lines end with \n,
 * \r\n or \r, and a \r\n may be split across two chunks. */
export class SseParser {
  private buffer = "";
  private skipLf = false; // the previous chunk ended with \r: a leading \n belongs to it
  private eventType = "";
  private data: string[] = [];
  private hasData = false;
  private idBuffer = "";
  /** The id of the last complete event (what a reconnection resumes after). An `id:` line
   * only counts once its event is complete: a half-received event is sent again. */
  lastEventId = "";
  /** A `retry:` the server asked for, in ms. */
  retry: number | undefined;

  constructor(lastEventId = "") {
    this.lastEventId = lastEventId;
    this.idBuffer = lastEventId;
  }

  feed(chunk: string): SseEvent[] {
    const out: SseEvent[] = [];
    let text = chunk;
    if (this.skipLf && text.startsWith("\n")) text = text.slice(1);
    this.skipLf = false;
    this.buffer += text;
    let start = 0;
    for (let i = 0; i < this.buffer.length; i++) {
      const c = this.buffer[i];
      if (c !== "\n" && c !== "\r") continue;
      const line = this.buffer.slice(start, i);
      if (c === "\r") {
        if (i + 1 < this.buffer.length) {
          if (this.buffer[i + 1] === "\n") i++;
        } else {
          this.skipLf = true;
        }
      }
      start = i + 1;
      const ev = this.line(line);
      if (ev) out.push(ev);
    }
    this.buffer = this.buffer.slice(start);
    return out;
  }

  /** Forget a half-received event (the connection broke); keeps the last event id. */
  reset(): void {
    this.buffer = "";
    this.skipLf = false;
    this.eventType = "";
    this.data = [];
    this.hasData = false;
    this.idBuffer = this.lastEventId;
  }

  private line(line: string): SseEvent | undefined {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined; // a comment (the server's keep-alive ping)
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.eventType = value;
        break;
      case "data":
        this.data.push(value);
        this.hasData = true;
        break;
      case "id":
        if (!value.includes("\0")) this.idBuffer = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
      default:
        break; // unknown fields are ignored
    }
    return undefined;
  }

  private dispatch(): SseEvent | undefined {
    this.lastEventId = this.idBuffer;
    const ev: SseEvent | undefined = this.hasData
      ? { event: this.eventType || "message", data: this.data.join("\n"), id: this.lastEventId }
      : undefined;
    this.eventType = "";
    this.data = [];
    this.hasData = false;
    return ev;
  }
}

export type SseStatus = "connecting" | "open" | "reconnecting" | "closed";

export interface SseOptions {
  url: string;
  /** Called before every (re)connection: headers such as Authorization. */
  headers?: () => Record<string, string>;
  /** Resume after this id (sent as Last-Event-ID on the first connection too). */
  lastEventId?: string;
  onEvent: (ev: SseEvent) => void;
  onStatus?: (status: SseStatus, error?: string) => void;
  /** A non-2xx answer; return false to stop reconnecting (401, 403, 404...). */
  onHttpError?: (status: number, body: unknown) => boolean;
  /** Delay before reconnecting after an error or the end of the stream, in ms. */
  retryMs?: number;
  fetch?: typeof fetch;
  /** Waits between attempts; replaceable in tests. */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
}

function defaultSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    });
  });
}

/** Open the stream and keep it open until the returned function is called: after a
 * network error, a non-fatal HTTP error or the server ending the stream, wait `retryMs`
 * and reconnect with `Last-Event-ID` set to the last id received. */
export function connectSse(opts: SseOptions): () => void {
  const ctl = new AbortController();
  const doFetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
  const sleep = opts.sleep ?? defaultSleep;
  const parser = new SseParser(opts.lastEventId ?? "");
  const status = (s: SseStatus, e?: string) => {
    if (!ctl.signal.aborted || s === "closed") opts.onStatus?.(s, e);
  };

  const run = async () => {
    status("connecting");
    while (!ctl.signal.aborted) {
      let error: string | undefined;
      try {
        const headers: Record<string, string> = {
          Accept: "text/event-stream",
          ...(opts.headers?.() ?? {}),
        };
        if (parser.lastEventId) headers["Last-Event-ID"] = parser.lastEventId;
        const res = await doFetch(opts.url, { headers, signal: ctl.signal, cache: "no-store" });
        if (!res.ok) {
          const body: unknown = await res.json().catch(() => undefined);
          const retry = opts.onHttpError?.(res.status, body) ?? res.status >= 500;
          if (!retry) {
            status("closed", `HTTP ${res.status}`);
            return;
          }
          error = `HTTP ${res.status}`;
        } else if (!res.body) {
          error = "the response has no body";
        } else {
          status("open");
          const reader = res.body.getReader();
          const decoder = new TextDecoder();
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            for (const ev of parser.feed(decoder.decode(value, { stream: true }))) opts.onEvent(ev);
          }
          error = "the server ended the stream";
        }
      } catch (e) {
        if (ctl.signal.aborted) break;
        error = e instanceof Error ? e.message : String(e);
      }
      parser.reset();
      if (ctl.signal.aborted) break;
      status("reconnecting", error);
      await sleep(parser.retry ?? opts.retryMs ?? 1000, ctl.signal);
    }
    opts.onStatus?.("closed");
  };
  void run();
  return () => ctl.abort();
}
