// The dev demo's numbers: the account's own and those the simulator treats as
// people. A module of their own so that `handset trigger` names them without
// loading the platform that `handset dev` starts.

/** The demo account's number at Telnyx. */
export const DEMO_NUMBER = '+13125550142';
/** The demo account's number at Twilio: messages only, and the fallback `handset trigger failover` uses. */
export const DEMO_TWILIO_NUMBER = '+13125550143';
/** The simulator's magic numbers: never answers, busy, answers after 2 s and talks 5 s. */
export const DEMO_RING = ['+15555550110', '+15555550111', '+15555550113'];
