// The first lines of a script executable (bin/<plugin>, run by `node`): its
// plugin bundle is embedded as a string by build.mjs and run with the code cache.
import { runWithCodeCache } from './code-cache';
import { ignoreNodeEnvironment } from './environment';

declare const __PAYLOAD__: string;
declare const __PAYLOAD_ID__: string;
declare const __PAYLOAD_SHA256__: string;

ignoreNodeEnvironment(false);
runWithCodeCache({ source: __PAYLOAD__, id: __PAYLOAD_ID__, sha256: __PAYLOAD_SHA256__ }, { exports, require, module, filename: __filename, dirname: __dirname });
