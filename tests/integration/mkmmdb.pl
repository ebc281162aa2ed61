#!/usr/bin/perl
# mkmmdb.pl OUT DATABASE_TYPE < JSON: writes a MaxMind database for the
# tests. JSON maps networks ("127.0.0.2/32") to records; strings, integers
# (autonomous_system_number), booleans (is_*) and nested maps/arrays.
# Reserved networks are kept so loopback addresses can be mapped.
use strict;
use warnings;
use JSON::PP;
use MaxMind::DB::Writer::Tree;

my ($out, $type) = @ARGV;
my $spec = decode_json(do { local $/; <STDIN> });
my %types = (
    autonomous_system_number => 'uint32',
    geoname_id               => 'uint32',
    subdivisions             => ['array', 'map'],
    map { $_ => 'map' } qw(country city names continent registered_country
                           location traits),
);
my $tree = MaxMind::DB::Writer::Tree->new(
    ip_version               => 6,
    record_size              => 28,
    database_type            => $type,
    languages                => ['en'],
    description              => { en => "strait test $type" },
    remove_reserved_networks => 0,
    map_key_type_callback    => sub {
        my $k = shift;
        return $types{$k} if exists $types{$k};
        return 'boolean' if $k =~ /^is_/;
        return 'utf8_string';
    },
);
for my $net (sort keys %$spec) {
    my $rec = $spec->{$net};
    for my $k (keys %$rec) {
        $rec->{$k} = $rec->{$k} ? 1 : 0 if JSON::PP::is_bool($rec->{$k});
    }
    $tree->insert_network($net, $rec);
}
open my $fh, '>:raw', $out or die "$out: $!";
$tree->write_tree($fh);
close $fh;
