// Looks into a running Node process through its inspector: runs a full garbage
// collection, so a test can compare the process's memory before and after
// something in the same state (V8 collects an idle process's old space when it
// decides to, seconds to minutes later, and what is still uncollected says nothing
// about what the process holds), and reads what V8 says it holds.
// The process must run with `--inspect=127.0.0.1:0` (NODE_OPTIONS below).

import { WebSocket } from 'undici';
import type { HandsetProcess } from './process.js';

/** Environment for a process whose inspector listens on a loopback port the OS picks. */
export const INSPECTABLE = { NODE_OPTIONS: '--inspect=127.0.0.1:0' };

/** Runs a full collection in the process (HeapProfiler.collectGarbage) and resolves once it is done. */
export async function collectGarbage(proc: HandsetProcess): Promise<void> {
  await call(proc, 'HeapProfiler.collectGarbage');
}

/** The process's `process.memoryUsage()`, in bytes. */
export async function memoryUsage(proc: HandsetProcess): Promise<NodeJS.MemoryUsage> {
  const answer = (await call(proc, 'Runtime.evaluate', {
    expression: 'JSON.stringify(process.memoryUsage())',
  })) as { result: { value: string } };
  return JSON.parse(answer.result.value) as NodeJS.MemoryUsage;
}

/** Sends one inspector command and resolves with its result. */
async function call(proc: HandsetProcess, method: string, params: object = {}): Promise<unknown> {
  const url = (await proc.waitFor(/Debugger listening on (ws:\/\/\S+)/))[1]!;
  const socket = new WebSocket(url);
  try {
    return await new Promise<unknown>((resolve, reject) => {
      socket.addEventListener('open', () => socket.send(JSON.stringify({ id: 1, method, params })));
      socket.addEventListener('message', (event) => {
        const answer = JSON.parse(String(event.data)) as { id?: number; result?: unknown; error?: { message: string } };
        if (answer.id !== 1) return;
        if (answer.error) reject(new Error(answer.error.message));
        else resolve(answer.result);
      });
      socket.addEventListener('error', () => reject(new Error(`inspector at ${url} failed`)));
    });
  } finally {
    socket.close();
  }
}
