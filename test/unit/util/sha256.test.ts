import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { sha256Hex } from '../../../src/util/sha256';
import { attachmentTags, hostVethName, netTag, vlanGatewayName, vlanGatewayPeerName } from '../../../src/bridge/names';

const ref = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');

describe('sha256Hex', () => {
  it('matches the FIPS test vectors', () => {
    expect(sha256Hex('')).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    expect(sha256Hex('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(sha256Hex('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq')).toBe(
      '248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1',
    );
  });

  it('matches node:crypto at every padding boundary and on random text', () => {
    for (let n = 0; n < 200; n++) expect(sha256Hex('x'.repeat(n))).toBe(ref('x'.repeat(n)));
    fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 300 }), (s) => sha256Hex(s) === ref(s)));
  });
});

describe('names', () => {
  it('derives a 15-byte host veth name from container ID and ifname, deterministically', () => {
    const a = hostVethName('abc123', 'eth0');
    expect(a).toMatch(/^veth[0-9a-f]{11}$/);
    expect(hostVethName('abc123', 'eth0')).toBe(a);
    expect(hostVethName('abc123', 'eth1')).not.toBe(a);
    expect(hostVethName('abc124', 'eth0')).not.toBe(a);
    expect(Buffer.byteLength(a)).toBe(15);
  });

  it('tags attachments per network, container and ifname', () => {
    const t = attachmentTags('net1', 'c1', 'eth0');
    expect(t.netTag).toMatch(/^[0-9a-f]{8}$/);
    expect(t.attTag).toMatch(/^[0-9a-f]{20}$/);
    expect(t.netTag).toBe(netTag('net1'));
    expect(attachmentTags('net2', 'c1', 'eth0').attTag).not.toBe(t.attTag);
    expect(attachmentTags('net1', 'c1', 'eth1').attTag).not.toBe(t.attTag);
  });

  it('names the VLAN gateway link like the reference', () => {
    expect(vlanGatewayName('cni0', 100)).toBe('cni0.100');
    expect(vlanGatewayPeerName('cni0', 100)).toMatch(/^veth[0-9a-f]{11}$/);
  });
});
