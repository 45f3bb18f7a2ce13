// One simulator and one webhook receiver per test file, as every simulator test
// uses them: started before the file, compressed 1000× (timeScale 0.001), reset
// after each test once the carrier is idle, closed after the file. The wall
// clock the simulator sees can be moved forward (offsetMs), and the receiver's
// answer chosen (answer); both go back to normal after each test. control()
// calls the simulator's control API (/_sim) as another process would.

import { afterAll, afterEach, beforeAll } from 'vitest';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../src/sim/simulator.js';
import { startReceiver, type Answer, type Receiver } from './receiver.js';

export interface Harness {
  readonly sim: Simulator;
  readonly rx: Receiver;
  /** Added to the simulator's wall clock (ms); 0 again after each test. */
  offsetMs: number;
  /** How the receiver answers each delivery; 200 again after each test. */
  answer: Answer;
  control(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }>;
}

export function useSimulator(options: SimulatorOptions & { seed: string }): Harness {
  let sim: Simulator | undefined;
  let rx: Receiver | undefined;
  const h: Harness = {
    get sim() {
      if (!sim) throw new Error('the simulator starts in beforeAll');
      return sim;
    },
    get rx() {
      if (!rx) throw new Error('the receiver starts in beforeAll');
      return rx;
    },
    offsetMs: 0,
    answer: () => 200,
    async control(method, path, body) {
      const res = await fetch(`${h.sim.controlUrl}${path}`, {
        method,
        ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
      });
      return { status: res.status, json: await res.json() };
    },
  };
  beforeAll(async () => {
    rx = await startReceiver((d, i) => h.answer(d, i));
    sim = await startSimulator({
      webhookUrl: rx.url,
      timeScale: 0.001,
      now: () => performance.timeOrigin + performance.now() + h.offsetMs,
      ...options,
    });
  });
  afterEach(async () => {
    // A delivery already on the wire would still land after reset(): let it.
    await h.sim.idle();
    h.sim.reset();
    h.rx.received.length = 0;
    h.offsetMs = 0;
    h.answer = () => 200;
  });
  afterAll(async () => {
    await sim?.close();
    await rx?.close();
  });
  return h;
}
