package pingpong

import (
	"context"
	"fmt"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/pingpong"
	"github.com/softrdma/softrdma/verbs"
)

// udQKey is the Q_Key ibv_ud_pingpong uses.
const udQKey = 0x11111111

func runUDPingpong(ctx context.Context, f *ppFlags) error {
	dev, err := f.opener.Open(f.dev)
	if err != nil {
		return err
	}
	defer dev.Close()
	port, err := dev.QueryPort(uint8(f.ibPort))
	if err != nil {
		return err
	}
	if f.size > port.ActiveMTU.Bytes() {
		return fmt.Errorf("Requested size larger than port MTU (%d)", port.ActiveMTU.Bytes())
	}
	r, err := newResources(dev, verbs.QPTypeUD, f.size, f.rxDepth, 1, f.events)
	if err != nil {
		return err
	}
	defer r.close()
	params := ppParams(f)
	params.QKey = udQKey
	if err := cm.Init(r.qp, params); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	routs, err := r.postRecvs(f.rxDepth, f.size)
	if err != nil {
		return err
	}
	local, err := localDest(dev, f, r.qp.QPNum())
	if err != nil {
		return err
	}
	fmt.Fprint(f.stdout, pingpong.UDLocalAddressLine(local))
	conn, err := ppConn(f)
	if err != nil {
		return err
	}
	defer conn.Close()
	var ah verbs.AH
	connect := func(rem pingpong.Dest) error {
		if err := cm.ReadyToReceive(r.qp, cm.Endpoint{}, params); err != nil {
			return fmt.Errorf("Failed to modify QP to RTR: %w", err)
		}
		if err := cm.ReadyToSend(r.qp, cm.Endpoint{PSN: local.PSN}, params); err != nil {
			return fmt.Errorf("Failed to modify QP to RTS: %w", err)
		}
		var err error
		ah, err = r.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, SL: uint8(f.sl), PortNum: uint8(f.ibPort),
			GRH: verbs.GlobalRoute{DGID: verbs.GID(rem.GID), SGIDIndex: uint8(max(f.gidx, 0)), HopLimit: 1}})
		if err != nil {
			return fmt.Errorf("Failed to create AH: %w", err)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	remote, err := exchange(ctx, f, conn, local, connect)
	if err != nil {
		return err
	}
	defer ah.Destroy()
	fmt.Fprint(f.stdout, pingpong.RemoteAddressLine(remote))
	return r.loop(ctx, f, routs, ah, remote.QPN, udQKey)
}
