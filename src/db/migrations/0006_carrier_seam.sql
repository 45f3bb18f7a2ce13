-- One seam per carrier: every row that came from or goes to a carrier names it,
-- uniqueness is per carrier, and the carrier's own words (Telnyx's
-- call_control_id) give way to Handset's: a leg's `carrier_ref` is the carrier's
-- reference for it, what its commands address. Owned by src/numbers and src/calls.

ALTER TABLE phone_numbers ADD COLUMN carrier text NOT NULL DEFAULT 'telnyx';
ALTER TABLE phone_numbers DROP CONSTRAINT phone_numbers_number_key;
ALTER TABLE phone_numbers ADD CONSTRAINT phone_numbers_carrier_number_key UNIQUE (carrier, number);

ALTER TABLE call_legs RENAME COLUMN call_control_id TO carrier_ref;
ALTER TABLE call_legs DROP COLUMN carrier_leg_id;
ALTER TABLE call_legs ADD COLUMN carrier text NOT NULL DEFAULT 'telnyx';
ALTER TABLE call_legs DROP CONSTRAINT call_legs_call_control_id_key;
ALTER TABLE call_legs ADD CONSTRAINT call_legs_carrier_ref_key UNIQUE (carrier, carrier_ref);

-- An inbound call is one per caller leg at its carrier: a re-sent call.initiated finds it taken.
ALTER TABLE calls DROP CONSTRAINT calls_carrier_caller_leg_id_key;
ALTER TABLE calls DROP COLUMN caller_leg_id;
ALTER TABLE calls RENAME COLUMN caller_call_control_id TO caller_ref;
DROP INDEX calls_caller_control;
ALTER TABLE calls ADD CONSTRAINT calls_carrier_caller_ref_key UNIQUE (carrier, caller_ref);

ALTER TABLE carrier_leg_endings RENAME COLUMN call_control_id TO carrier_ref;
