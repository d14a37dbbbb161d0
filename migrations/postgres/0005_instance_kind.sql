-- What an instance serves (tenants.Instance.Kind): "chat" (chat and text
-- completions) or "embedding" (/v1/embeddings).
ALTER TABLE instances ADD COLUMN kind text NOT NULL DEFAULT 'chat' CHECK (kind IN ('chat', 'embedding'));
