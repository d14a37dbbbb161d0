package vllmemu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// TaskTable maps exact prompts to tasks. It implements TaskLookup; it is
// read-only after loading and so safe for concurrent use.
type TaskTable map[string]string

// Task returns the task of prompt, if the table has it.
func (t TaskTable) Task(prompt string) (string, bool) {
	task, ok := t[prompt]
	return task, ok
}

// ReadTaskTable reads JSON lines with "prompt" and "task" fields (the line
// format of labelled data such as data/llmrouter/train.jsonl and the demo
// set; other fields are ignored). Lines without a task are skipped.
func ReadTaskTable(r io.Reader) (TaskTable, error) {
	t := TaskTable{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var rec struct {
			Prompt string `json:"prompt"`
			Task   string `json:"task"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if rec.Task != "" {
			t[rec.Prompt] = rec.Task
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	return t, nil
}

// LoadTaskTable reads a task table from a JSON-lines file.
func LoadTaskTable(path string) (TaskTable, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("task data: %w", err)
	}
	defer f.Close()
	t, err := ReadTaskTable(f)
	if err != nil {
		return nil, fmt.Errorf("task data %s: %w", path, err)
	}
	return t, nil
}
