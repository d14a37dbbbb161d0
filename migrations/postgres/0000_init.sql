-- placeholder so the embed pattern matches before the first schema lands; creates nothing
SELECT 1;
