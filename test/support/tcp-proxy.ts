// The chaos run's cuttable TCP proxy, for tests that put it in front of PostgreSQL.
export { startTcpProxy, type TcpProxy } from '../../src/tools/chaos/tcp-proxy.js';
