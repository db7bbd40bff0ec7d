// An HTTP/1.1 response taken apart from the bytes of a connection: the
// status line and headers, then the body as it comes (chunked, of a
// Content-Length, or up to the connection's close).
//
// Why our own and not node:http for a watch: node:http's parser calls back
// once per chunk of a chunked body, and a watch sends one chunk per event.
// With 5,000 kubelets rewriting their Node every 10 s that is ~100 µs of
// Node's stream machinery per event before any of our code runs (measured:
// docs/speed.md, "Watches read in batches"). Read from the socket directly,
// a read of 64 KB holds many events and costs one callback.
//
// The server is not trusted: the head has a size limit, a chunk-size line
// has one, and anything that is not HTTP/1.1 framing is an error (thrown by
// push() or finish(), with a message saying what came).

/** A response's status line and headers (names in lower case; a repeated header's values joined by ", "). */
export interface ResponseHead {
  status: number;
  headers: Map<string, string>;
}

export interface ResponseHandlers {
  /** The head came (the final one: 1xx interim heads are skipped). */
  head(head: ResponseHead): void;
  /** Some of the body's bytes: a view into the chunk pushed, valid until push() returns. */
  body(bytes: Buffer): void;
  /** The body is over. */
  end(): void;
}

/** The most a status line and headers may be together. */
export const MAX_HEAD_BYTES = 64 * 1024;
/** The most a chunk-size line (with any chunk extensions) or the trailers may be. */
const MAX_CHUNK_LINE_BYTES = 4 * 1024;

const EMPTY = Buffer.alloc(0);
const CRLF = Buffer.from('\r\n');
const HEAD_END = Buffer.from('\r\n\r\n');

type State =
  | { at: 'head' }
  | { at: 'size' } // a chunk-size line
  | { at: 'data'; left: number } // a chunk's bytes
  | { at: 'data-end'; seen: number } // the CRLF after a chunk's bytes (how much of it came)
  | { at: 'trailers' } // after the last chunk: trailer lines up to an empty one
  | { at: 'fixed'; left: number } // a Content-Length body
  | { at: 'until-close' }
  | { at: 'done' };

export class ResponseDecoder {
  private state: State = { at: 'head' };
  /** The bytes of a line (or head) begun in earlier chunks, and the last few of them (where its end may have begun). */
  private held: Buffer[] = [];
  private heldBytes = 0;
  private tail: Buffer = EMPTY;

  constructor(private readonly on: ResponseHandlers) {}

  /** Whether the body is over. */
  get done(): boolean {
    return this.state.at === 'done';
  }

  /** The connection's next bytes; throws an Error when they are not HTTP/1.1. */
  push(chunk: Buffer): void {
    let i = 0;
    while (i < chunk.length) {
      const s = this.state;
      switch (s.at) {
        case 'head': {
          const head = this.lineUntil(chunk, i, HEAD_END, MAX_HEAD_BYTES, 'the status line and headers');
          if (!head) return;
          i = head.next;
          this.readHead(head.text);
          break;
        }
        case 'size': {
          const line = this.lineUntil(chunk, i, CRLF, MAX_CHUNK_LINE_BYTES, 'a chunk-size line');
          if (!line) return;
          i = line.next;
          const size = chunkSize(line.text);
          this.state = size === 0 ? { at: 'trailers' } : { at: 'data', left: size };
          break;
        }
        case 'data': {
          const take = Math.min(s.left, chunk.length - i);
          s.left -= take;
          if (s.left === 0) this.state = { at: 'data-end', seen: 0 };
          this.on.body(chunk.subarray(i, i + take));
          i += take;
          break;
        }
        case 'data-end': {
          // the CRLF after a chunk's bytes, which may come split
          if (chunk[i] !== CRLF[s.seen]) throw new Error(`a chunk longer than its size (byte 0x${chunk[i].toString(16)} where its CRLF belongs)`);
          i++;
          if (++s.seen === 2) this.state = { at: 'size' };
          break;
        }
        case 'trailers': {
          const line = this.lineUntil(chunk, i, CRLF, MAX_CHUNK_LINE_BYTES, 'a trailer');
          if (!line) return;
          i = line.next;
          if (line.text === '') this.finishBody();
          break;
        }
        case 'fixed': {
          const take = Math.min(s.left, chunk.length - i);
          s.left -= take;
          this.on.body(chunk.subarray(i, i + take));
          i += take;
          if (s.left === 0) this.finishBody();
          break;
        }
        case 'until-close':
          this.on.body(i === 0 ? chunk : chunk.subarray(i));
          return;
        case 'done':
          throw new Error(`${chunk.length - i} bytes after the end of the response`);
      }
    }
  }

  /** The connection closed: ends a body that runs to the close; throws when the response was not over. */
  finish(): void {
    if (this.state.at === 'until-close') return this.finishBody();
    if (this.state.at !== 'done') throw new Error(this.state.at === 'head' ? 'the connection closed before a response came' : 'the connection closed inside the body');
  }

  private finishBody(): void {
    this.state = { at: 'done' };
    this.on.end();
  }

  private readHead(text: string): void {
    const [statusLine, ...fields] = text.split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3})(?: .*)?$/.exec(statusLine);
    if (!m) throw new Error(`a status line that is not HTTP/1.1: ${JSON.stringify(statusLine.slice(0, 100))}`);
    const status = Number(m[1]);
    const headers = new Map<string, string>();
    for (const field of fields) {
      const colon = field.indexOf(':');
      if (colon <= 0 || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(field.slice(0, colon))) throw new Error(`a header line that is not one: ${JSON.stringify(field.slice(0, 100))}`);
      const name = field.slice(0, colon).toLowerCase();
      const value = field.slice(colon + 1).trim();
      const before = headers.get(name);
      headers.set(name, before === undefined ? value : `${before}, ${value}`);
    }
    if (status >= 100 && status < 200) return; // an interim answer (100 Continue): the real one follows
    this.state = bodyFraming(status, headers);
    this.on.head({ status, headers });
    if (this.state.at === 'fixed' && this.state.left === 0) this.finishBody();
  }

  /**
   * The text up to `end` (without it), from the bytes held and this chunk
   * from `from`; null (the bytes held) when `end` has not come yet. Only the
   * new bytes (and the last few held, where `end` may have begun) are
   * searched, and the held pieces joined once: a line that comes a byte at
   * a time costs its length, not its length squared.
   */
  private lineUntil(chunk: Buffer, from: number, end: Buffer, limit: number, what: string): { text: string; next: number } | null {
    const tail = this.tail;
    const piece = chunk.subarray(from, from + limit + end.length - this.heldBytes);
    const probe = tail.length ? Buffer.concat([tail, piece]) : piece;
    const at = probe.indexOf(end);
    if (at < 0) {
      if (piece.length < chunk.length - from || this.heldBytes + piece.length > limit + end.length - 1) throw new Error(`${what} longer than ${limit} bytes`);
      this.held.push(Buffer.from(piece)); // a copy: the chunk is the caller's
      this.heldBytes += piece.length;
      this.tail = Buffer.from(probe.subarray(Math.max(0, probe.length - (end.length - 1))));
      return null;
    }
    const length = this.heldBytes - tail.length + at; // the text's length
    if (length > limit) throw new Error(`${what} longer than ${limit} bytes`);
    const next = from + at - tail.length + end.length;
    const text = this.heldBytes ? Buffer.concat([...this.held, piece]).toString('latin1', 0, length) : chunk.toString('latin1', from, from + length);
    this.held = [];
    this.heldBytes = 0;
    this.tail = EMPTY;
    return { text, next };
  }
}

/** How the body after this head is framed (RFC 9112 section 6.3, for a response to a GET). */
function bodyFraming(status: number, headers: Map<string, string>): State {
  if (status === 204 || status === 304) return { at: 'fixed', left: 0 };
  const coding = headers.get('content-encoding');
  if (coding !== undefined && coding.toLowerCase() !== 'identity') throw new Error(`a body in Content-Encoding "${coding}" (none was asked for)`);
  const te = headers.get('transfer-encoding');
  if (te !== undefined) {
    if (te.toLowerCase() !== 'chunked') throw new Error(`a body in Transfer-Encoding "${te}" (only chunked is read)`);
    return { at: 'size' };
  }
  const length = headers.get('content-length');
  if (length !== undefined) {
    if (!/^\d{1,15}$/.test(length)) throw new Error(`a Content-Length that is not a number: ${JSON.stringify(length.slice(0, 40))}`);
    return { at: 'fixed', left: Number(length) };
  }
  return { at: 'until-close' };
}

/** A chunk-size line's size (its extensions, after ";", ignored). */
function chunkSize(line: string): number {
  const hex = line.split(';', 1)[0].trim();
  if (!/^[0-9A-Fa-f]{1,12}$/.test(hex)) throw new Error(`a chunk-size line that is not a size: ${JSON.stringify(line.slice(0, 40))}`);
  return parseInt(hex, 16);
}
