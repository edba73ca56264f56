package verbs

import "fmt"

// AsyncEventType is the kind of an asynchronous event (enum
// ibv_event_type).
type AsyncEventType uint8

// Asynchronous events, as libibverbs names them. The QP events carry the
// QP, the CQ event the CQ, the SRQ event the SRQ, the port events the port.
const (
	// EventQPFatal: the QP hit an error that is not one work request's
	// (IBV_EVENT_QP_FATAL); it is in the error state.
	EventQPFatal AsyncEventType = iota + 1
	// EventQPReqErr: the QP's responder found an invalid request
	// (IBV_EVENT_QP_REQ_ERR); it is in the error state.
	EventQPReqErr
	// EventQPAccessErr: the QP's responder found a remote access
	// violation (IBV_EVENT_QP_ACCESS_ERR); it is in the error state.
	EventQPAccessErr
	// EventCommEst: the first packet arrived on a QP in RTR
	// (IBV_EVENT_COMM_EST): the connection is established.
	EventCommEst
	// EventSQDrained: a QP moved to SQD has no send work in flight
	// (IBV_EVENT_SQ_DRAINED).
	EventSQDrained
	// EventQPLastWQEReached: a QP attached to an SRQ went to the error
	// state and will take no more receive WQEs from it
	// (IBV_EVENT_QP_LAST_WQE_REACHED).
	EventQPLastWQEReached
	// EventSRQLimitReached: the SRQ's posted WQEs fell below the limit
	// set with SRQ.Modify (IBV_EVENT_SRQ_LIMIT_REACHED); the limit is
	// disarmed until set again.
	EventSRQLimitReached
	// EventCQErr: the CQ overflowed (IBV_EVENT_CQ_ERR): completions were
	// lost; CQ.Poll reports it too.
	EventCQErr
	// EventPortActive: the port became active (IBV_EVENT_PORT_ACTIVE).
	EventPortActive
	// EventPortErr: the port went down (IBV_EVENT_PORT_ERR).
	EventPortErr
	// EventDeviceFatal: the device failed and must be closed
	// (IBV_EVENT_DEVICE_FATAL).
	EventDeviceFatal
)

func (t AsyncEventType) String() string {
	switch t {
	case EventQPFatal:
		return "QP_FATAL"
	case EventQPReqErr:
		return "QP_REQ_ERR"
	case EventQPAccessErr:
		return "QP_ACCESS_ERR"
	case EventCommEst:
		return "COMM_EST"
	case EventSQDrained:
		return "SQ_DRAINED"
	case EventQPLastWQEReached:
		return "QP_LAST_WQE_REACHED"
	case EventSRQLimitReached:
		return "SRQ_LIMIT_REACHED"
	case EventCQErr:
		return "CQ_ERR"
	case EventPortActive:
		return "PORT_ACTIVE"
	case EventPortErr:
		return "PORT_ERR"
	case EventDeviceFatal:
		return "DEVICE_FATAL"
	}
	return fmt.Sprintf("AsyncEventType(%d)", uint8(t))
}

// AsyncEvent is one asynchronous event (struct ibv_async_event): the
// field that matches its Type is set.
type AsyncEvent struct {
	Type AsyncEventType
	QP   QP
	CQ   CQ
	SRQ  SRQ
	Port uint8
}

func (e AsyncEvent) String() string {
	switch {
	case e.QP != nil:
		return fmt.Sprintf("%v on QP %d", e.Type, e.QP.QPNum())
	case e.Port != 0:
		return fmt.Sprintf("%v on port %d", e.Type, e.Port)
	}
	return e.Type.String()
}

// AsyncEventer is implemented by contexts that report asynchronous events
// (ibv_get_async_event). The channel is buffered; a context never blocks
// to deliver an event: when the buffer is full the event is dropped and
// counted, so read it promptly. The channel is closed when the context is.
type AsyncEventer interface {
	AsyncEvents() <-chan AsyncEvent
}
