// Opt-outs: who may no longer be texted from which of your numbers (a STOP they
// sent, the carrier's refusal, or an entry made here), filtered by number or
// recipient, with a form to add one and a button to opt a recipient back in.

import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { answer, client, idempotencyKey } from '../api.js';
import { Badge, ErrorBox, Time, usePageTitle, useSubmit } from '../components.js';
import { FilterSelect, FromSelect, ListView, setFilter, useList, useNumbers } from './shared.js';

const SOURCE_LABEL = /** @type {Record<string, string>} */ ({
  keyword: 'Texted STOP',
  carrier: 'Refused by the carrier',
  api: 'Added by you',
});

/** @param {{ search: string }} props */
export function OptOutList({ search }) {
  usePageTitle('Opt-outs');
  const list = useList('/v1/opt_outs', search, ['number', 'recipient']);
  const numbers = useNumbers();
  const submit = useSubmit();
  const q = new URLSearchParams(search);
  /** @param {string} id */
  const optIn = (id) =>
    submit.run(async () => {
      await answer(client.DELETE('/v1/opt_outs/{id}', { params: { path: { id } } }));
      list.reload();
    });
  return html`<main id="main">
    <h1 tabindex="-1">Opt-outs</h1>
    <p class="muted">Recipients who may not be texted from one of your numbers. A send to them is refused
      (<code>recipient_opted_out</code>) until they text START, or you opt them back in here.</p>
    <${AddOptOut} numbers=${numbers} onAdded=${() => list.reload()} />
    <form class="filters" role="search" onSubmit=${(/** @type {Event} */ e) => e.preventDefault()}>
      <${FilterSelect} id="oo-number" label="Of your number" name="number" search=${search}
        options=${numbers.map((n) => n.number)} all="All" />
      <div class="field"><label for="oo-recipient">Find a recipient</label>
        <input id="oo-recipient" type="tel" placeholder="+15555550100" value=${q.get('recipient') ?? ''}
          onChange=${(/** @type {any} */ e) => setFilter(search, 'recipient', e.currentTarget.value.trim())} /></div>
    </form>
    <${ErrorBox} error=${submit.error} />
    <${ListView} list=${list} search=${search} label="Opt-outs" empty="Nobody has opted out."
      columns=${[
        { label: 'Recipient', kind: 'title', cell: (/** @type {any} */ o) => o.recipient },
        {
          label: 'Why',
          kind: 'status',
          cell: (/** @type {any} */ o) =>
            html`<${Badge} value=${o.source} label=${SOURCE_LABEL[o.source] ?? o.source} />`,
        },
        { label: 'Your number', cell: (/** @type {any} */ o) => o.number },
        { label: 'Since', cell: (/** @type {any} */ o) => html`<${Time} at=${o.created_at} />` },
        {
          label: 'Action',
          kind: 'action',
          head: html`<span class="visually-hidden">Action</span>`,
          cell: (/** @type {any} */ o) => html`<button type="button" class="caution" disabled=${submit.busy}
            onClick=${() => optIn(o.id)} aria-label=${`Opt ${o.recipient} back in to ${o.number}`}>Opt back in</button>`,
        },
      ]} />
  </main>`;
}

/** @param {{ numbers: any[], onAdded: () => void }} props */
function AddOptOut({ numbers, onAdded }) {
  const [number, setNumber] = useState('');
  const [recipient, setRecipient] = useState('');
  const [key, setKey] = useState(idempotencyKey);
  const submit = useSubmit();
  const ours = number || numbers[0]?.number || '';
  /** @param {Event} e */
  const add = (e) => {
    e.preventDefault();
    submit.run(async () => {
      await answer(
        client.POST('/v1/opt_outs', {
          params: { header: { 'idempotency-key': key } },
          body: { number: ours, recipient: recipient.trim() },
        }),
      );
      setRecipient('');
      setKey(idempotencyKey());
      onAdded();
    });
  };
  return html`<details class="compose">
    <summary>Add an opt-out</summary>
    <form onSubmit=${add}>
      <div class="field"><label for="oo-add-number">Your number</label>
        <${FromSelect} id="oo-add-number" value=${ours} onChange=${setNumber} numbers=${numbers} /></div>
      <div class="field"><label for="oo-add-recipient">Recipient</label>
        <input id="oo-add-recipient" type="tel" required placeholder="+15555550100" value=${recipient}
          onInput=${(/** @type {any} */ e) => setRecipient(e.currentTarget.value)} /></div>
      <button type="submit" class="primary" disabled=${submit.busy || !ours}>${submit.busy ? 'Adding…' : 'Add'}</button>
    </form>
    <${ErrorBox} error=${submit.error} />
  </details>`;
}
