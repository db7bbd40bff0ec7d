// Assembles dist/cni-ts-image.tar: an image archive in the docker-archive
// layout (manifest.json, the config, one tarball per layer), which
// `podman load`, `docker load` and `ctr images import` all accept. Two
// layers: the Debian base (base.sh; cached, it changes only with its
// script) and ours (the standalone executable under every plugin name), so a
// new release pushes one layer. No container engine is needed.
//
//   node packaging/image/archive.mjs OUT.tar BASE.tar EXECUTABLE NAME:TAG
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, linkSync, mkdirSync, mkdtempSync, rmSync, copyFileSync, chmodSync, writeFileSync, renameSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const [out, base, executable, ref] = process.argv.slice(2);
if (!out || !base || !executable || !/^[a-z0-9./:-]+:[\w.-]+$/.test(ref ?? '')) {
  console.error('usage: archive.mjs OUT.tar BASE.tar EXECUTABLE NAME:TAG');
  process.exit(2);
}
const PLUGIN_DIR = 'opt/cni-ts/bin';
const DOC_DIR = 'usr/share/doc/cni-ts';
const DOCS = ['LICENSE', 'THIRD-PARTY-NOTICES'];
// vxlan-flannel first: the others are hard links of it in the layer
const NAMES = ['vxlan-flannel', 'flannel', 'bridge', 'host-local'];
const repo = join(dirname(fileURLToPath(import.meta.url)), '../..');
// The image's date: the commit's (the same commit, the same image), or SOURCE_DATE_EPOCH; outside a git
// checkout, package.json's time. A fixed date made every image "created 3 years ago".
const commitEpoch = () => {
  try {
    const out = execFileSync('git', ['-C', repo, 'log', '-1', '--format=%ct'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    return Number(out.trim());
  } catch {
    return Math.floor(statSync(join(repo, 'package.json')).mtimeMs / 1000);
  }
};
const epoch = Number(process.env.SOURCE_DATE_EPOCH || commitEpoch());

const sha256 = (file) =>
  new Promise((ok, fail) => {
    const h = createHash('sha256');
    createReadStream(file).on('data', (d) => h.update(d)).on('end', () => ok(h.digest('hex'))).on('error', fail);
  });

// beside the output: the layers are hard-linked into the archive's staging directory, not copied
const work = mkdtempSync(join(dirname(resolve(out)), '.cni-ts-image-'));
try {
  // our layer: /opt/cni-ts/bin, off the PATH (a plugin named `bridge` ahead of iproute2's on the PATH
  // would make the daemon's `bridge fdb` run the CNI plugin)
  const root = join(work, 'root');
  mkdirSync(join(root, PLUGIN_DIR), { recursive: true });
  copyFileSync(executable, join(root, PLUGIN_DIR, NAMES[0]));
  chmodSync(join(root, PLUGIN_DIR, NAMES[0]), 0o755);
  for (const n of NAMES.slice(1)) linkSync(join(root, PLUGIN_DIR, NAMES[0]), join(root, PLUGIN_DIR, n));
  // the licenses: ours, and the notices the build made of what the executable holds (packaging/notices.mjs)
  mkdirSync(join(root, DOC_DIR), { recursive: true });
  // the notices lie beside the executable's bin directory (dist/, dist/arm64/): its own architecture's build
  const sources = { LICENSE: join(repo, 'LICENSE'), 'THIRD-PARTY-NOTICES': join(dirname(resolve(executable)), '..', 'THIRD-PARTY-NOTICES') };
  for (const file of DOCS) copyFileSync(sources[file], join(root, DOC_DIR, file));
  const app = join(work, 'app.tar');
  execFileSync('tar', ['-C', root, '--sort=name', '--owner=0', '--group=0', '--numeric-owner', `--mtime=@${epoch}`, '-cf', app, 'opt', 'usr']);

  const layers = [resolve(base), app];
  const digests = [];
  for (const l of layers) digests.push(await sha256(l));
  const created = new Date(epoch * 1000).toISOString();
  const config = {
    architecture: process.env.IMAGE_ARCH ?? 'amd64',
    os: 'linux',
    created,
    config: {
      Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'],
      Entrypoint: [`/${PLUGIN_DIR}/vxlan-flannel`],
      Cmd: ['daemon', '--ip-masq', '--kube-subnet-mgr', '--healthz-port=8081'],
      Labels: { 'org.opencontainers.image.title': 'cni-ts', 'org.opencontainers.image.version': ref.split(':').pop() },
    },
    rootfs: { type: 'layers', diff_ids: digests.map((d) => `sha256:${d}`) },
    history: [
      { created, created_by: 'packaging/image/base.sh (mmdebstrap: iproute2 iptables nftables procps util-linux)' },
      { created, created_by: `packaging/image/archive.mjs: /${PLUGIN_DIR}/{${NAMES.join(',')}}, /${DOC_DIR}/{${DOCS.join(',')}}` },
    ],
  };
  const configText = JSON.stringify(config);
  const configName = `${createHash('sha256').update(configText).digest('hex')}.json`;
  const stage = join(work, 'stage');
  mkdirSync(stage);
  writeFileSync(join(stage, configName), configText);
  const layerNames = digests.map((d) => `${d}.tar`);
  layers.forEach((l, i) => linkSync(l, join(stage, layerNames[i])));
  writeFileSync(join(stage, 'manifest.json'), JSON.stringify([{ Config: configName, RepoTags: [ref], Layers: layerNames }]));
  const tmpOut = join(dirname(resolve(out)), `.${process.pid}.image.tar`);
  execFileSync('tar', ['-C', stage, '--owner=0', '--group=0', '--numeric-owner', `--mtime=@${epoch}`, '-cf', tmpOut, 'manifest.json', configName, ...layerNames]);
  renameSync(tmpOut, out);
  console.log(`${out}: ${ref}, layers ${digests.map((d) => d.slice(0, 12)).join(' ')}`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
