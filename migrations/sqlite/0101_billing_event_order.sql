-- state_at_ms is the creation time (Unix ms) of the newest Stripe event
-- applied to the account's subscription/payment state; older events
-- delivered late are recorded but change nothing.
ALTER TABLE billing_accounts ADD COLUMN state_at_ms INTEGER;
