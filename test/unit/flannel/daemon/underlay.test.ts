// Underlay selection as flanneld does it: --iface (names or addresses,
// repeatable, first match wins), --iface-regex (addresses, then names),
// --iface-can-reach (the route's interface and source), else --public-ip or
// the default route; and the subnets the underlay is directly on.
import { afterEach, describe, expect, it } from 'vitest';
import { setRunner, type Runner } from '../../../../src/iproute/exec';
import type { IpLink } from '../../../../src/iproute/link';
import { chooseByFlags, findUnderlay } from '../../../../src/flannel/daemon/underlay';

const link = (ifname: string, addrs: [string, number][], up = true): IpLink => ({
  ifindex: 2,
  ifname,
  flags: up ? ['UP'] : [],
  mtu: 1500,
  addr_info: addrs.map(([local, prefixlen]) => ({ family: local.includes(':') ? 'inet6' : 'inet', local, prefixlen, scope: 'global' })),
});
const links = [
  link('lo', [['127.0.0.1', 8]]),
  link('eth0', [['192.168.88.1', 24], ['fd88::1', 64]]),
  link('eth1', [['10.10.0.5', 16], ['10.10.7.7', 16]]),
  link('wg0', [['172.20.0.1', 24]], false),
];

describe('chooseByFlags', () => {
  it('--iface: a name or an address, the first that matches wins', () => {
    expect(chooseByFlags(links, { iface: 'eth1' })?.link.ifname).toBe('eth1');
    expect(chooseByFlags(links, { iface: ['nope0', '10.10.7.7', 'eth0'] })).toMatchObject({ link: { ifname: 'eth1' }, addr: expect.objectContaining({}) });
    expect(chooseByFlags(links, { iface: ['nope0', '10.10.7.7'] })?.addr?.toString()).toBe('10.10.7.7');
    expect(chooseByFlags(links, { iface: 'fd88::1' })?.link.ifname).toBe('eth0');
    expect(chooseByFlags(links, {})).toBeUndefined();
    expect(chooseByFlags(links, { iface: ['nope0', '10.99.0.1'] })).toBeUndefined();
  });

  it('--iface-regex after --iface: addresses first, then names, each regex in order', () => {
    expect(chooseByFlags(links, { iface: 'nope0', ifaceRegex: ['^10\\.10\\.7\\.'] })).toMatchObject({ link: { ifname: 'eth1' } });
    expect(chooseByFlags(links, { ifaceRegex: ['^10\\.10\\.7\\.'] })?.addr?.toString()).toBe('10.10.7.7');
    expect(chooseByFlags(links, { ifaceRegex: ['^nomatch$', '^eth'] })).toEqual({ link: links[1] });
    expect(chooseByFlags(links, { iface: 'eth1', ifaceRegex: ['^eth0$'] })?.link.ifname).toBe('eth1');
    expect(() => chooseByFlags(links, { ifaceRegex: ['('] })).toThrow(/--iface-regex "\(":/);
  });
});

describe('findUnderlay', () => {
  let restore: Runner | undefined;
  const commands: string[] = [];
  // A runner of its own rather than the fake kernel: these tests hand the code the kernel's routing
  // decisions (`ip route get`, the default routes) as canned answers, which the fake kernel does not model.
  const fake = (routeGet: unknown, defaults: Record<string, unknown[]> = {}) => {
    commands.length = 0;
    restore = setRunner(async (argv) => {
      const cmd = argv.join(' ');
      commands.push(cmd);
      if (cmd === 'ip -json -details addr show') return { stdout: JSON.stringify(links), stderr: '', code: 0 };
      if (cmd.startsWith('ip -json route get ')) return { stdout: JSON.stringify(routeGet), stderr: '', code: 0 };
      const m = /^ip -json (-4|-6) route show default$/.exec(cmd);
      if (m) return { stdout: JSON.stringify(defaults[m[1]] ?? []), stderr: '', code: 0 };
      throw new Error(`unexpected ${cmd}`);
    });
  };
  afterEach(() => {
    if (restore) setRunner(restore);
  });

  it('--iface by address: that address is the tunnel source and the public IP; the link\'s subnets are listed', async () => {
    fake([]);
    const u = await findUnderlay({ iface: '10.10.7.7' });
    expect([u.dev, u.localIP?.toString(), u.publicIP?.toString()]).toEqual(['eth1', '10.10.7.7', '10.10.7.7']);
    expect(u.subnets.map(String)).toEqual(['10.10.0.0/16']);
    expect(commands).toEqual(['ip -json -details addr show']);
  });

  it('--iface-can-reach: the route\'s interface and source address', async () => {
    fake([{ dst: '10.10.200.1', dev: 'eth1', prefsrc: '10.10.7.7' }]);
    const u = await findUnderlay({ ifaceCanReach: '10.10.200.1' });
    expect([u.dev, u.localIP?.toString()]).toEqual(['eth1', '10.10.7.7']);
    expect(commands).toContain('ip -json route get 10.10.200.1');
  });

  it('flags given and nothing matches: an error naming what was tried and what there is', async () => {
    fake([]);
    await expect(findUnderlay({ iface: ['nope0'], ifaceRegex: ['^x'] })).rejects.toThrow(/no interface matches --iface nope0, --iface-regex \^x \(there are: lo:\[127.0.0.1\], eth0/);
  });

  it('no flag: --public-ip picks the link, else the default route does; a down link is refused', async () => {
    fake([], { '-4': [{ dst: 'default', gateway: '192.168.88.254', dev: 'eth0' }] });
    expect((await findUnderlay({})).dev).toBe('eth0');
    expect((await findUnderlay({ publicIp: '10.10.0.5' })).localIP?.toString()).toBe('10.10.0.5');
    await expect(findUnderlay({ iface: 'wg0' })).rejects.toThrow('underlay interface wg0 is down');
  });
});
