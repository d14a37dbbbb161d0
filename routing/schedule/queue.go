package schedule

import (
	"container/heap"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/fleet"
)

// ticketState is where a Ticket is in its life.
type ticketState uint8

const (
	ticketNew       ticketState = iota // submitted, not yet decided
	ticketQueued                       // decided, waiting in an admission queue
	ticketAdmitted                     // holds a lease
	ticketReleased                     // lease ended
	ticketRejected                     // decision failed (Err set)
	ticketCancelled                    // caller gave up before admission
)

// Ticket is one request's passage through a Core: Assign decides it, the
// admission queue holds it until its instance has room, and Release ends
// it. Its caller sets Req and Notify, reads Decision, Err and Admitted
// after Notify, and must not touch the other fields.
type Ticket struct {
	Req *routing.Request
	// Notify is called exactly once, when the ticket is admitted (Err nil)
	// or rejected (Err set). It runs under the Core's lock: it must not
	// block or call back into the Core.
	Notify func(*Ticket)
	// Decision is valid once admitted; Decision.QueueWait is the time spent
	// in the admission queue.
	Decision routing.Decision
	// Err is the rejection: routing.ErrUnknownModel, ErrNoHealthyInstance,
	// ErrNoCapacity or ErrClosed.
	Err error
	// Admitted is the (clock) time of admission.
	Admitted time.Time

	state    ticketState
	member   *fleet.Member
	lease    *fleet.Lease
	q        *admitQueue
	heapIdx  int
	level    int     // starvation level: higher goes first
	passOver int     // times passed over at the current level
	key      float64 // predicted remaining tokens of the workflow
	seq      uint64  // arrival order
	decided  time.Time
	spec     fleet.LeaseSpec
	workflow *stickyEntry
	tier     *tierBias // T̂ correction of the tier it was predicted on
	raw      float64   // T̂ without the correction, seconds (Decision.PredictedE2E has it)
}

// admitQueue is one instance's STJF admission queue: ordered by
// (starvation level desc, priority class, predicted remaining workflow
// tokens, arrival).
type admitQueue []*Ticket

func (q admitQueue) Len() int { return len(q) }

func (q admitQueue) Less(a, b int) bool { return before(q[a], q[b]) }

// before is the admission order: x is admitted before y.
func before(x, y *Ticket) bool {
	if x.level != y.level {
		return x.level > y.level
	}
	if x.Req.Priority != y.Req.Priority {
		return x.Req.Priority < y.Req.Priority
	}
	if x.key != y.key {
		return x.key < y.key
	}
	return x.seq < y.seq
}

func (q admitQueue) Swap(a, b int) {
	q[a], q[b] = q[b], q[a]
	q[a].heapIdx = a
	q[b].heapIdx = b
}

func (q *admitQueue) Push(x any) {
	t := x.(*Ticket)
	t.heapIdx = len(*q)
	*q = append(*q, t)
}

func (q *admitQueue) Pop() any {
	old := *q
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	t.heapIdx = -1
	return t
}

// pop removes the head and ages every ticket it overtook: a ticket that
// arrived earlier than the head and is passed over agingN times rises one
// starvation level.
func (q *admitQueue) pop(agingN int) *Ticket {
	t := heap.Pop(q).(*Ticket)
	if agingN <= 0 {
		return t
	}
	changed := false
	for _, o := range *q {
		if o.seq < t.seq {
			o.passOver++
			if o.passOver >= agingN {
				o.passOver = 0
				o.level++
				changed = true
			}
		}
	}
	if changed {
		heap.Init(q)
	}
	return t
}

// remove takes t out of the queue.
func (q *admitQueue) remove(t *Ticket) {
	if t.heapIdx >= 0 && t.heapIdx < len(*q) && (*q)[t.heapIdx] == t {
		heap.Remove(q, t.heapIdx)
	}
}
