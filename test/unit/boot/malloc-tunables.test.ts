import { describe, expect, it } from 'vitest';
import { startsDaemon, withDaemonTunables } from '../../../src/boot/malloc-tunables';

describe('withDaemonTunables', () => {
  it('gives every tunable of ours when none is set', () => {
    expect(withDaemonTunables(undefined)).toBe('glibc.malloc.mmap_threshold=16384:glibc.malloc.arena_max=2');
    expect(withDaemonTunables('')).toBe('glibc.malloc.mmap_threshold=16384:glibc.malloc.arena_max=2');
  });

  it("keeps the operator's tunables and values, adding only ours that are missing", () => {
    expect(withDaemonTunables('glibc.malloc.arena_max=4')).toBe('glibc.malloc.arena_max=4:glibc.malloc.mmap_threshold=16384');
    expect(withDaemonTunables('glibc.malloc.check=3:glibc.malloc.mmap_threshold=262144')).toBe('glibc.malloc.check=3:glibc.malloc.mmap_threshold=262144:glibc.malloc.arena_max=2');
  });

  it('is undefined when all of ours are set already (a restarted daemon does not restart again)', () => {
    const ours = withDaemonTunables(undefined);
    expect(withDaemonTunables(ours)).toBeUndefined();
    expect(withDaemonTunables('glibc.malloc.arena_max=8:glibc.malloc.mmap_threshold=1048576')).toBeUndefined();
  });
});

describe('startsDaemon', () => {
  it('is the daemon command of vxlan-flannel only', () => {
    expect(startsDaemon('vxlan-flannel', ['daemon', '--kube-subnet-mgr'])).toBe(true);
    expect(startsDaemon('vxlan-flannel', ['leases'])).toBe(false);
    expect(startsDaemon('vxlan-flannel', [])).toBe(false);
    expect(startsDaemon('flannel', ['daemon'])).toBe(false);
    expect(startsDaemon('host-local', ['daemon'])).toBe(false);
  });
});
