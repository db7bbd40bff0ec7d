// Loads the etcd3 client inside a single-file bundle. etcd3 reads its gRPC
// service definitions from `${__dirname}/../proto/*.proto` at load time, which
// does not exist next to bin/vxlan-flannel; so the .proto texts are bundled
// (esbuild's text loader) and served to protobufjs from memory.
import rpcProto from 'etcd3/proto/rpc.proto' with { type: 'text' };
import kvProto from 'etcd3/proto/kv.proto' with { type: 'text' };
import authProto from 'etcd3/proto/auth.proto' with { type: 'text' };
import * as fs from 'node:fs';
import { basename } from 'node:path';

const EMBEDDED: Record<string, string> = { 'rpc.proto': rpcProto, 'kv.proto': kvProto, 'auth.proto': authProto };

let loaded: Promise<typeof import('etcd3')> | undefined;

export function loadEtcd3(): Promise<typeof import('etcd3')> {
  loaded ??= (async () => {
    const protobuf = (await import('protobufjs')) as unknown as { util: { fs: unknown }; default?: { util: { fs: unknown } } };
    const util = protobuf.util ?? protobuf.default?.util;
    util.fs = {
      ...fs,
      readFileSync(path: string, ...rest: unknown[]) {
        const name = basename(String(path));
        if (String(path).includes('/proto/') && name in EMBEDDED && !fs.existsSync(path)) return Buffer.from(EMBEDDED[name]);
        return (fs.readFileSync as (...a: unknown[]) => unknown)(path, ...rest);
      },
    };
    return import('etcd3');
  })();
  return loaded;
}
