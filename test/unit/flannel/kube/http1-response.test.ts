// The watch's HTTP/1.1 response decoder (src/flannel/kube/http1-response.ts):
// every framing a server may use, split at every byte, and what a broken or
// hostile server sends refused with a message that says what came.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MAX_HEAD_BYTES, ResponseDecoder, type ResponseHead } from '../../../../src/flannel/kube/http1-response';

/** Decodes `parts` pushed in turn; what came out, in order. */
function decode(parts: (string | Buffer)[], closeAfter = false) {
  const heads: ResponseHead[] = [];
  const body: Buffer[] = [];
  let ended = 0;
  const d = new ResponseDecoder({ head: (h) => heads.push(h), body: (b) => body.push(Buffer.from(b)), end: () => ended++ });
  for (const p of parts) d.push(typeof p === 'string' ? Buffer.from(p, 'latin1') : p);
  if (closeAfter) d.finish();
  return { heads, body: Buffer.concat(body).toString(), ended, done: d.done, d };
}

/** `text` cut at every split point into two pushes, and into one push per byte. */
const splits = (text: string): string[][] => [...Array.from({ length: text.length + 1 }, (_, i) => [text.slice(0, i), text.slice(i)]), [...text]];

const CHUNKED = 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n' + '7\r\n{"a":1}\r\n' + 'a;name=value\r\n\n{"b":22}\n\r\n' + '0\r\nX-Trailer: t\r\n\r\n';

describe('an HTTP/1.1 response, decoded', () => {
  it('reads a chunked body (extensions and trailers too), split at any byte', () => {
    for (const parts of splits(CHUNKED)) {
      const r = decode(parts);
      expect(r.heads).toEqual([{ status: 200, headers: new Map([['content-type', 'application/json'], ['transfer-encoding', 'chunked']]) }]);
      expect(r.body).toBe('{"a":1}\n{"b":22}\n');
      expect([r.ended, r.done]).toEqual([1, true]);
    }
  });

  it('reads a body of a Content-Length, one that runs to the close, and none (204)', () => {
    const fixed = 'HTTP/1.1 403 Forbidden\r\nContent-Length: 11\r\n\r\n{"kind":1}\n';
    for (const parts of splits(fixed)) {
      const r = decode(parts);
      expect([r.heads[0].status, r.body, r.ended]).toEqual([403, '{"kind":1}\n', 1]);
    }
    const toClose = decode(['HTTP/1.0 200 OK\r\n\r\nab', 'c'], true);
    expect([toClose.body, toClose.ended]).toEqual(['abc', 1]);
    expect(decode(['HTTP/1.1 204 No Content\r\n\r\n']).ended).toBe(1);
    expect(decode(['HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n']).ended).toBe(1);
  });

  it('skips an interim 100 Continue, and joins a repeated header', () => {
    const r = decode(['HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nWarning: a\r\nwarning: b\r\nContent-Length: 2\r\n\r\nok']);
    expect(r.heads).toEqual([{ status: 200, headers: new Map([['warning', 'a, b'], ['content-length', '2']]) }]);
    expect(r.body).toBe('ok');
  });

  it('says the connection closed before the response, or inside its body', () => {
    expect(() => decode(['HTTP/1.1 200 OK\r\n'], true)).toThrow('the connection closed before a response came');
    expect(() => decode(['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab'], true)).toThrow('the connection closed inside the body');
    expect(() => decode(['HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab'], true)).toThrow('the connection closed inside the body');
  });

  for (const [what, parts, message] of [
    ['a status line that is not HTTP', ['SSH-2.0-OpenSSH_9.2\r\n\r\n'], 'a status line that is not HTTP/1.1: "SSH-2.0-OpenSSH_9.2"'],
    ['HTTP/2', ['HTTP/2 200\r\n\r\n'], 'a status line that is not HTTP/1.1: "HTTP/2 200"'],
    ['a header without a colon', ['HTTP/1.1 200 OK\r\nbroken header\r\n\r\n'], 'a header line that is not one: "broken header"'],
    ['a header name with a space', ['HTTP/1.1 200 OK\r\nContent Length: 3\r\n\r\n'], 'a header line that is not one: "Content Length: 3"'],
    ['a gzipped body', ['HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n'], 'a body in Content-Encoding "gzip" (none was asked for)'],
    ['a transfer coding other than chunked', ['HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n'], 'a body in Transfer-Encoding "gzip, chunked" (only chunked is read)'],
    ['a Content-Length that is not a number', ['HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n'], 'a Content-Length that is not a number: "-1"'],
    ['a chunk size that is not hex', ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n'], 'a chunk-size line that is not a size: "zz"'],
    ['a chunk size past 2^48', ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000\r\n'], 'a chunk-size line that is not a size: "1000000000000"'],
    ['a chunk longer than its size', ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n'], 'a chunk longer than its size (byte 0x62 where its CRLF belongs)'],
    ['bytes after the end', ['HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab'], '1 bytes after the end of the response'],
    ['a chunk-size line without end', ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n', '1'.repeat(5000)], 'a chunk-size line longer than 4096 bytes'],
  ] as [string, string[], string][]) {
    it(`refuses ${what}`, () => {
      expect(() => decode(parts)).toThrow(message);
    });
  }

  describe('a head', () => {
    const head = (bytes: number) => `HTTP/1.1 200 OK\r\nX-Pad: ${'p'.repeat(bytes - 24)}\r\n\r\n`;
    it(`may be ${MAX_HEAD_BYTES} bytes, in one piece or a byte at a time; one more is refused`, () => {
      const exact = head(MAX_HEAD_BYTES);
      expect(exact.length).toBe(MAX_HEAD_BYTES + 4);
      expect(decode([exact]).heads).toHaveLength(1);
      expect(decode([...exact]).heads).toHaveLength(1);
      expect(() => decode([head(MAX_HEAD_BYTES + 1)])).toThrow(`the status line and headers longer than ${MAX_HEAD_BYTES} bytes`);
      expect(() => decode([...head(MAX_HEAD_BYTES + 1)])).toThrow(`the status line and headers longer than ${MAX_HEAD_BYTES} bytes`);
      // a head that never ends is refused as soon as it passes the limit, not held
      const endless = new ResponseDecoder({ head: () => {}, body: () => {}, end: () => {} });
      endless.push(Buffer.from('HTTP/1.1 200 OK\r\n'));
      expect(() => endless.push(Buffer.alloc(MAX_HEAD_BYTES, 'h'))).toThrow('longer than');
    });

    afterEach(() => vi.restoreAllMocks());
    it('that comes a byte at a time costs its length in copies, not its length squared', () => {
      let copied = 0;
      const concat = Buffer.concat;
      vi.spyOn(Buffer, 'concat').mockImplementation((list, total) => {
        const out = concat(list, total);
        copied += out.length;
        return out;
      });
      const text = head(MAX_HEAD_BYTES);
      expect(decode([...text]).heads).toHaveLength(1);
      // each byte: the last three held and the new one probed; the head joined once at the end
      expect(copied).toBeLessThanOrEqual(text.length * 5);
    });
  });
});
