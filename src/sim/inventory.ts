// The simulated Telnyx account's phone numbers: what GET /v2/phone_numbers answers
// from. A real account holds the numbers it bought; this one holds every number of
// the fictional 555 exchange (+1 NPA 555 XXXX, where the demo numbers, the magic
// personas and the tests' numbers live) except NOT_OURS — numbers that belong to
// somebody else's account, to see a claim refused — plus any added through the
// control API (PUT /_sim/numbers/{number}), minus any removed (DELETE).

/** +1, an area code, the 555 exchange: fictional numbers (NANP reserves 555-0100…0199; we take the whole exchange). */
const FICTIONAL = /^\+1[2-9]\d{2}555\d{4}$/;

/** In the 555 exchange but not this account's. */
export const NOT_OURS: readonly string[] = ['+13125550666', '+14155550666', '+15555550666'];

export class Inventory {
  private added = new Set<string>();
  private removed = new Set<string>();

  holds(number: string): boolean {
    if (this.removed.has(number)) return false;
    return this.added.has(number) || (FICTIONAL.test(number) && !NOT_OURS.includes(number));
  }

  add(number: string): void {
    this.removed.delete(number);
    this.added.add(number);
  }

  remove(number: string): void {
    this.added.delete(number);
    this.removed.add(number);
  }

  /** The numbers added and removed through the control API (the rule above holds for the rest). */
  changes(): { added: string[]; removed: string[] } {
    return { added: [...this.added].sort(), removed: [...this.removed].sort() };
  }

  /**
   * What Telnyx's `filter[phone_number]` finds: the numbers held whose digits contain
   * the filter's (at least three digits; anything but digits finds nothing). Of the
   * rule's endless exchange only the one number a filter spells out whole is listed.
   */
  find(filter: string): string[] {
    if (!/^\d{3,15}$/.test(filter)) return [];
    const whole = `+${filter}`;
    const found = new Set([...this.added].filter((n) => n.slice(1).includes(filter)));
    if (this.holds(whole)) found.add(whole);
    return [...found].sort();
  }

  reset(): void {
    this.added = new Set();
    this.removed = new Set();
  }
}
