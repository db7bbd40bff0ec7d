// node:https and node:tls, required when a server's URL asks for them (https://), not when a
// client's module loads: loading node:tls costs a process ~5 MiB of memory (the crypto modules it
// brings, OpenSSL's state and code pages), which a daemon on an etcd over plain HTTP never needs (docs/speed.md, "No
// optimizing compiler, TLS only where it is asked for, and TLS's buffers").
import type https from 'node:https';
import type tls from 'node:tls';

export const httpsModule = (): typeof https => require('node:https');
export const tlsModule = (): typeof tls => require('node:tls');
