-- state_at is the creation time of the newest Stripe event applied to the
-- account's subscription/payment state; older events delivered late are
-- recorded but change nothing.
ALTER TABLE billing_accounts ADD COLUMN state_at timestamptz;
