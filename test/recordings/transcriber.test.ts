// Which transcription engine a deployment talks to: the one configured, else
// the carrier's own, read from the carrier settings the platform actually runs
// with — dev swaps in the simulator's after the environment is read, and its
// transcriptions must go to the simulator, not to api.telnyx.com.

import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { transcriberOptions } from '../../src/recordings/transcriber.js';

const asDevRunsIt = (env: NodeJS.ProcessEnv) => {
  const config = loadConfig(env, 'dev');
  return { ...config, telnyx: { ...config.telnyx, apiUrl: 'http://127.0.0.1:3002/v2', apiKey: 'sim-key' } };
};

describe('the transcription engine', () => {
  it("unset, it is the carrier's engine and key as the platform runs with them (dev: the simulator's)", () => {
    expect(transcriberOptions(asDevRunsIt({}))).toEqual({
      url: 'http://127.0.0.1:3002/v2/ai/audio/transcriptions',
      model: 'distil-whisper/distil-large-v2',
      apiKey: 'sim-key',
    });
  });

  it('HANDSET_TRANSCRIPTION_URL, _MODEL and _API_KEY win', () => {
    const env = {
      HANDSET_TRANSCRIPTION_URL: 'https://whisper.example.com/v1/audio/transcriptions',
      HANDSET_TRANSCRIPTION_MODEL: 'whisper-1',
      HANDSET_TRANSCRIPTION_API_KEY: 'sk-test',
    };
    expect(transcriberOptions(asDevRunsIt(env))).toEqual({
      url: 'https://whisper.example.com/v1/audio/transcriptions',
      model: 'whisper-1',
      apiKey: 'sk-test',
    });
  });
});
