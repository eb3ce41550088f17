// One Realtime session over a WebSocket, GA dialect, that survives dropped sockets.
//
// Opens with `session.update` as the first message. Every session event carries
// `server_event_seq`; the highest one seen is remembered. When the socket drops (and the
// session did not end), it reconnects to `/v1/realtime?resume=1` and sends
// `session.resume` with the last resume token and that seq: the server answers
// `session.resumed` (a rotated token) and replays what was missed; anything replayed
// twice is dropped here by its seq, so the page sees every event exactly once.
//
// Events: "state" ({state, detail}), "event" (each server event, in order).

export const API_KEY_SUBPROTOCOL = "openai-insecure-api-key.";
const TERMINAL = new Set(["session.closed", "session.expired", "session.replaced"]);
const RESUME_FATAL = new Set([
  "session_resume_expired",
  "invalid_resume_token",
  "unsupported_session_resume",
  "invalid_session_resume",
  "unauthorized",
]);

export function realtimeUrl(base, params = {}) {
  const url = new URL("/v1/realtime", base);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  // The page reads our duplex events (session.resumed, session.closed, ...).
  url.searchParams.set("duplex", "1");
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  return url.toString();
}

export class RealtimeSession extends EventTarget {
  constructor({ base = location.href, apiKey = "", graceMs = 30000 } = {}) {
    super();
    this.base = base;
    this.apiKey = apiKey;
    this.graceMs = graceMs;
    this.ws = null;
    this.state = "idle";
    this.sessionId = null;
    this.resumeToken = null;
    this.generation = 0;
    this.lastSeq = 0;
    this.duplicates = 0;
    this.resumes = 0;
    this.reconnectAttempts = 0;
    this.userClosed = false;
    this.ended = false;
    this.sessionConfig = null;
    this.droppedSince = null;
    this.ackTimer = null;
  }

  setState(state, detail = "") {
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, detail } }));
  }

  protocols() {
    const offered = ["realtime"];
    if (this.apiKey) offered.push(API_KEY_SUBPROTOCOL + this.apiKey);
    return offered;
  }

  open(sessionConfig) {
    this.sessionConfig = sessionConfig;
    this.userClosed = false;
    this.ended = false;
    this.lastSeq = 0;
    this.sessionId = null;
    this.resumeToken = null;
    this.setState("connecting");
    this.attach(false);
  }

  attach(resume) {
    let ws;
    try {
      ws = new WebSocket(realtimeUrl(this.base, resume ? { resume: "1" } : {}), this.protocols());
    } catch (err) {
      this.setState("failed", `Cannot open a WebSocket: ${err.message}`);
      return;
    }
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      if (resume) {
        ws.send(
          JSON.stringify({
            type: "session.resume",
            session_id: this.sessionId,
            resume_token: this.resumeToken,
            last_received_server_event_seq: this.lastSeq,
          }),
        );
      } else {
        ws.send(JSON.stringify({ type: "session.update", session: this.sessionConfig }));
      }
    };
    ws.onmessage = (msg) => this.receive(msg.data, resume);
    ws.onclose = (close) => {
      if (this.ws !== ws) return;
      this.ws = null;
      clearInterval(this.ackTimer);
      this.onClosed(close, opened, resume);
    };
  }

  receive(data, resuming) {
    let event;
    try {
      event = JSON.parse(data);
    } catch {
      return;
    }
    const seq = event.server_event_seq;
    if (typeof seq === "number") {
      if (seq <= this.lastSeq) {
        this.duplicates++;
        return;
      }
      this.lastSeq = seq;
    }
    switch (event.type) {
      case "session.created":
        this.sessionId = event.session?.id ?? null;
        this.resumeToken = event.resume_token ?? null;
        this.generation = event.attachment_generation ?? 1;
        this.reconnectAttempts = 0;
        this.setState("open");
        this.startAcks();
        break;
      case "session.resumed":
        this.resumeToken = event.resume_token ?? this.resumeToken;
        this.generation = event.attachment_generation ?? this.generation + 1;
        this.resumes++;
        this.reconnectAttempts = 0;
        this.droppedSince = null;
        this.setState("open", "resumed");
        this.startAcks();
        break;
      case "session.resync_required":
        this.ended = true;
        this.setState("failed", `The server could not replay what was missed (${event.reason}); start a new session.`);
        break;
      case "error":
        if (resuming && this.state === "reconnecting" && RESUME_FATAL.has(event.error?.code)) {
          this.ended = true;
        }
        break;
      default:
        if (TERMINAL.has(event.type)) this.ended = true;
    }
    this.dispatchEvent(new CustomEvent("event", { detail: event }));
  }

  startAcks() {
    clearInterval(this.ackTimer);
    // Let the server trim its replay journal: everything up to lastSeq has arrived.
    this.ackTimer = setInterval(() => {
      if (this.lastSeq > 0) this.send({ type: "session.event_ack", server_event_seq: this.lastSeq });
    }, 5000);
  }

  onClosed(close, opened, resumed) {
    if (this.userClosed) {
      this.setState("closed", "you ended the session");
      return;
    }
    if (this.ended || !this.sessionId || !this.resumeToken) {
      if (!this.sessionId && !opened) {
        this.setState("failed", "The server refused the connection (is it running? is the API key right?)");
      } else if (this.ended) {
        this.setState("closed", close.reason || "session ended");
      } else {
        this.setState("failed", `Connection closed (${close.code}${close.reason ? `: ${close.reason}` : ""})`);
      }
      return;
    }
    // A dropped socket: resume the same session on a new one, with backoff.
    if (this.droppedSince === null) this.droppedSince = performance.now();
    if (performance.now() - this.droppedSince > this.graceMs) {
      this.setState("failed", "Could not reconnect before the session expired.");
      return;
    }
    const delay = Math.min(2000, 100 * 2 ** this.reconnectAttempts);
    this.reconnectAttempts++;
    this.setState("reconnecting", `socket dropped (${close.code}); resuming in ${delay} ms`);
    setTimeout(() => {
      if (!this.userClosed && !this.ended) this.attach(true);
    }, delay);
  }

  get connected() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN && this.state === "open";
  }

  send(command) {
    if (!this.connected) return false;
    this.ws.send(JSON.stringify(command));
    return true;
  }

  close() {
    this.userClosed = true;
    clearInterval(this.ackTimer);
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify({ type: "session.close" }));
      setTimeout(() => this.ws && this.ws.close(1000, "client_close"), 500);
    } else if (this.ws) {
      this.ws.close();
    } else {
      this.setState("closed", "you ended the session");
    }
  }

  // Test hook and "simulate a network drop": close the socket without ending the session.
  dropSocket() {
    if (this.ws) this.ws.close(4000, "dropped by the page");
  }
}
