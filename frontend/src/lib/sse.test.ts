import { describe, expect, it } from "vitest";
import { connectSse, SseParser, type SseEvent } from "./sse";

const STEP = 'event: step\r\nid: 7\r\ndata: {"id": 7, "step": 3}\r\n\r\n';

describe("SseParser", () => {
  it("parses a whole event", () => {
    const p = new SseParser();
    expect(p.feed(STEP)).toEqual([{ event: "step", id: "7", data: '{"id": 7, "step": 3}' }]);
    expect(p.lastEventId).toBe("7");
  });

  it("gives the same events however the stream is split, even inside \\r\\n", () => {
    const text = STEP + ": ping - 2026-01-01 00:00:00\r\n\r\n" + STEP.replaceAll("7", "8");
    const whole = new SseParser().feed(text);
    expect(whole.map((e) => e.id)).toEqual(["7", "8"]);
    for (let size = 1; size <= 9; size++) {
      const p = new SseParser();
      const got: SseEvent[] = [];
      for (let i = 0; i < text.length; i += size) got.push(...p.feed(text.slice(i, i + size)));
      expect(got).toEqual(whole);
    }
    // Split exactly between \r and \n: the \n must not end another (empty) line.
    const p = new SseParser();
    const cut = STEP.indexOf("\r\n") + 1;
    expect(p.feed(STEP.slice(0, cut))).toEqual([]);
    expect(p.feed(STEP.slice(cut))).toHaveLength(1);
  });

  it("handles \\n and \\r line ends, multi-line data, comments and missing spaces", () => {
    const p = new SseParser();
    const evs = p.feed("data:a\ndata: b\n\n: comment\rid:9\revent:x\rdata\r\r");
    expect(evs).toEqual([
      { event: "message", data: "a\nb", id: "" },
      { event: "x", data: "", id: "9" },
    ]);
  });

  it("keeps the last id across events and ignores events without data", () => {
    const p = new SseParser("3");
    expect(p.feed("id: 4\n\n")).toEqual([]);
    expect(p.lastEventId).toBe("4");
    expect(p.feed("data: z\n\n")).toEqual([{ event: "message", data: "z", id: "4" }]);
  });

  it("drops a half-received event on reset but keeps the id", () => {
    const p = new SseParser();
    p.feed("id: 5\ndata: whole\n\nid: 6\ndata: half");
    p.reset();
    expect(p.lastEventId).toBe("5");
    expect(p.feed("\n\n")).toEqual([]);
  });
});

function streamOf(chunks: string[]): Response {
  const enc = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      for (const ch of chunks) c.enqueue(enc.encode(ch));
      c.close();
    },
  });
  return new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
}

describe("connectSse", () => {
  it("reconnects after the stream ends, sending Last-Event-ID and the auth header", async () => {
    const seen: (string | null)[] = [];
    const auth: (string | null)[] = [];
    const events: string[] = [];
    const sleeps: number[] = [];
    let calls = 0;
    let stop: () => void = () => {};
    const done = new Promise<void>((resolve) => {
      const fakeFetch = async (_url: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
        const h = new Headers(init?.headers);
        seen.push(h.get("Last-Event-ID"));
        auth.push(h.get("Authorization"));
        calls++;
        if (calls === 1) return streamOf(["id: 1\nevent: step\ndata: a\n\nid: 2\nevent: st", "ep\ndata: b\n\nid: 3\ndata: cut-"]);
        if (calls === 2) throw new TypeError("network down");
        if (calls === 3) return streamOf(["id: 3\nevent: step\ndata: c\n\n"]);
        stop();
        resolve();
        return new Response(null, { status: 200 });
      };
      stop = connectSse({
        url: "/stream",
        headers: () => ({ Authorization: "Bearer t" }),
        onEvent: (e) => events.push(`${e.id}:${e.data}`),
        fetch: fakeFetch as typeof fetch,
        sleep: async (ms) => {
          sleeps.push(ms);
        },
      });
    });
    await done;
    expect(events).toEqual(["1:a", "2:b", "3:c"]);
    // The half event (id 3, no blank line) was not delivered, so the resume id stays 2.
    expect(seen).toEqual([null, "2", "2", "3"]);
    expect(auth.every((a) => a === "Bearer t")).toBe(true);
    expect(sleeps).toEqual([1000, 1000, 1000]);
  });

  it("stops on an HTTP error the caller says is fatal", async () => {
    const statuses: string[] = [];
    let httpStatus = 0;
    await new Promise<void>((resolve) => {
      connectSse({
        url: "/stream",
        onEvent: () => {},
        onHttpError: (status) => {
          httpStatus = status;
          return false;
        },
        onStatus: (s) => {
          statuses.push(s);
          if (s === "closed") resolve();
        },
        fetch: (async () =>
          new Response(JSON.stringify({ code: "unauthorized", message: "no" }), {
            status: 401,
          })) as typeof fetch,
      });
    });
    expect(httpStatus).toBe(401);
    expect(statuses[0]).toBe("connecting");
    expect(statuses).toContain("closed");
  });
});
