package deviceplugin

import (
	"context"
	"errors"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	basepb "github.com/gpufrac/gpufrac/nomad-device/proto/base"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
)

// Handshake is the go-plugin handshake every Nomad plugin uses. A binary started without the
// cookie refuses to run, which keeps an accidental `./nomad-device-gpufrac` from hanging.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
}

// Plugin set names Nomad's loader dispenses.
const (
	PluginBase   = "base"
	PluginDevice = "device"
)

// Serve runs s as a Nomad device plugin until Nomad kills the process. Both services share
// go-plugin's one gRPC server; stdout carries nothing but go-plugin's handshake line.
func Serve(s *Server, logger hclog.Logger) {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins: goplugin.PluginSet{
			PluginBase:   &grpcPlugin{register: func(g *grpc.Server) { basepb.RegisterBasePluginServer(g, baseServer{s: s}) }},
			PluginDevice: &grpcPlugin{register: func(g *grpc.Server) { devicepb.RegisterDevicePluginServer(g, deviceServer{s: s}) }},
		},
		GRPCServer: goplugin.DefaultGRPCServer,
		Logger:     logger,
	})
}

// grpcPlugin registers one service; the client half is never used, because Nomad is the client.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	register func(*grpc.Server)
}

func (p *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, g *grpc.Server) error {
	p.register(g)
	return nil
}

func (p *grpcPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (interface{}, error) {
	return nil, errors.New("nomad-device-gpufrac only serves; Nomad is the client")
}

// baseServer and deviceServer adapt Server to the two generated interfaces; they are separate
// types because each generated interface wants its own Unimplemented embed.
type baseServer struct {
	basepb.UnimplementedBasePluginServer
	s *Server
}

func (b baseServer) PluginInfo(ctx context.Context, _ *basepb.PluginInfoRequest) (*basepb.PluginInfoResponse, error) {
	return b.s.PluginInfo(), nil
}

func (b baseServer) ConfigSchema(ctx context.Context, _ *basepb.ConfigSchemaRequest) (*basepb.ConfigSchemaResponse, error) {
	return &basepb.ConfigSchemaResponse{Spec: ConfigSpec()}, nil
}

func (b baseServer) SetConfig(ctx context.Context, req *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	if err := b.s.SetConfig(req.GetMsgpackConfig(), req.GetPluginApiVersion()); err != nil {
		return nil, err
	}
	return &basepb.SetConfigResponse{}, nil
}

type deviceServer struct {
	devicepb.UnimplementedDevicePluginServer
	s *Server
}

func (d deviceServer) Fingerprint(_ *devicepb.FingerprintRequest, stream grpc.ServerStreamingServer[devicepb.FingerprintResponse]) error {
	return d.s.Fingerprint(stream.Context(), stream.Send)
}

func (d deviceServer) Reserve(ctx context.Context, req *devicepb.ReserveRequest) (*devicepb.ReserveResponse, error) {
	res, err := d.s.Reserve(ctx, req.GetDeviceIds())
	if err != nil {
		return nil, grpcError(err)
	}
	return &devicepb.ReserveResponse{ContainerRes: res}, nil
}

func (d deviceServer) Stats(req *devicepb.StatsRequest, stream grpc.ServerStreamingServer[devicepb.StatsResponse]) error {
	return d.s.Stats(stream.Context(), req.GetCollectionInterval().AsDuration(), stream.Send)
}
